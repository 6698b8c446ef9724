#!/usr/bin/env python3
"""Goldens for starting from Hugging Face checkpoints (tests/nn/test_hf_import.cpp).

Builds random-init models with transformers offline, as a user's save_pretrained would write
them, and writes each under tests/golden/data/hf_import_<name>/: config.json and
model.safetensors exactly as save_pretrained wrote them, plus hf_logits.safetensors (ids I32
[B, T], logits F32 [B, T, V]; metadata: generator, loss = transformers' mean next-token
cross-entropy of the ids, as a decimal).
  gpt2   GPT2LMHeadModel, vocabulary 300, GPT-2's own dropout rates (0.1 everywhere)
  llama  LlamaForCausalLM, vocabulary 300, 4 query heads on 2 kv heads, rope_theta 500000,
         rms_norm_eps 1e-6, untied head, saved in bfloat16 (widened exactly when loaded)
With --mantissa BIN it also fine-tunes the GPT-2 with mantissa (`train --init-from`, 3 steps,
--dropout 0) and loads mantissa's save with transformers strictly (any missing or unexpected
name is an error): hf_import_gpt2_tuned/ holds that save and transformers' logits of it.

On demand only (transformers is too heavy for CI); any transformers >= 4.40 with PyTorch 2:
  bench/torch_venv.sh && .cache/venv-bench/bin/pip install transformers safetensors
  .cache/venv-bench/bin/python tests/golden/make_golden_hf_import.py --mantissa build/mantissa
"""
import argparse
import os
import shutil
import struct
import subprocess
import tempfile

import torch
import transformers
from safetensors.torch import save_file

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
B, T = 2, 16


def logits_and_loss(model, ids):
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
    return logits, float(loss)


def write(name, model_dir, model, ids):
    out = os.path.join(DATA, f"hf_import_{name}")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for f in ("config.json", "model.safetensors"):
        shutil.copyfile(os.path.join(model_dir, f), os.path.join(out, f))
    logits, loss = logits_and_loss(model, ids)
    gen = f"transformers {transformers.__version__}, torch {torch.__version__}"
    save_file({"ids": ids.to(torch.int32).contiguous(), "logits": logits.contiguous()},
              os.path.join(out, "hf_logits.safetensors"), metadata={"generator": gen, "loss": repr(loss)})
    print(f"{out}: loss {loss:.6f} ({gen})")


def token_file(path, ids):
    """llm.c's format: 256 int32 of header (magic 20240520, version 1, count), uint16 ids."""
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(ids)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header) + struct.pack(f"<{len(ids)}H", *ids))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mantissa", help="the mantissa program, to fine-tune the GPT-2 and load its save back")
    args = ap.parse_args()
    torch.manual_seed(20261204)
    torch.set_num_threads(1)
    work = tempfile.mkdtemp()
    ids = torch.randint(0, 300, (B, T), generator=torch.Generator().manual_seed(7))

    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=300, n_positions=T, n_embd=32, n_layer=2, n_head=2)).eval()
    with torch.no_grad():  # biases and norms off their 0 / 1 init, so a misplaced one shows
        for n, p in gpt2.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    gpt2.save_pretrained(os.path.join(work, "gpt2"))
    write("gpt2", os.path.join(work, "gpt2"), gpt2, ids)

    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=T, rope_theta=500000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=False)).eval()
    with torch.no_grad():
        for n, p in llama.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    llama = llama.to(torch.bfloat16)
    llama.save_pretrained(os.path.join(work, "llama"))
    write("llama", os.path.join(work, "llama"), llama.float(), ids)

    if args.mantissa:
        data = os.path.join(work, "tokens.bin")
        token_file(data, [int(x) for x in torch.randint(0, 300, (4096,), generator=torch.Generator().manual_seed(8))])
        tuned = os.path.join(work, "gpt2_tuned")
        subprocess.run([args.mantissa, "train", "--init-from", os.path.join(work, "gpt2"), "--data", data,
                        "--steps", "3", "--seq-len", str(T), "--batch-size", "4", "--dropout", "0", "--lr", "1e-2",
                        "--threads", "1", "--save", tuned], check=True)
        model, info = transformers.GPT2LMHeadModel.from_pretrained(tuned, output_loading_info=True,
                                                                    dtype=torch.float32)
        bad = {k: v for k, v in info.items() if v}
        if bad:
            raise SystemExit(f"{tuned}: transformers did not load it strictly: {bad}")
        write("gpt2_tuned", tuned, model.eval(), ids)
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
