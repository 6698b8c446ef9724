#!/usr/bin/env python3
"""Goldens from Hugging Face transformers' own LlamaForCausalLM for tests/nn/test_hf_llama.cpp.

Loads a directory mantissa saved (`mantissa train --model llama --save DIR`: config.json +
model.safetensors) with LlamaForCausalLM.from_pretrained, strictly: any missing or unexpected
parameter name is an error. Then computes float32 logits for a fixed batch of byte ids and
writes tests/golden/data/llama_hf/ = the model directory (config.json, model.safetensors)
plus hf_logits.safetensors (ids I32 [B, T], logits F32 [B, T, V], generator in metadata).
The C++ test loads the directory with mantissa and compares its logits with these.

On demand only (transformers is too heavy for CI). transformers 4.36 runs on Debian's PyTorch:
  /usr/bin/python3 -m venv --system-site-packages .cache/hfvenv
  .cache/hfvenv/bin/pip install transformers==4.36.2
  .cache/hfvenv/bin/python tests/golden/make_golden_llama_hf.py SAVED_DIR
"""
import os
import shutil
import sys

import torch
import transformers
from transformers import LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import save_safetensors  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "llama_hf")


def main(argv):
    if len(argv) != 2:
        sys.exit("usage: make_golden_llama_hf.py MANTISSA_SAVED_DIR")
    src = argv[1]
    model, info = LlamaForCausalLM.from_pretrained(src, output_loading_info=True, torch_dtype=torch.float32)
    bad = {k: v for k, v in info.items() if v}
    if bad:
        sys.exit(f"{src}: transformers did not load it strictly: {bad}")
    model.eval()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(99)
    B, T = 2, model.config.max_position_embeddings
    ids = torch.randint(0, model.config.vocab_size, (B, T), generator=gen)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    os.makedirs(OUT, exist_ok=True)
    for name in ("config.json", "model.safetensors"):
        shutil.copyfile(os.path.join(src, name), os.path.join(OUT, name))
    save_safetensors(os.path.join(OUT, "hf_logits.safetensors"),
                     [("ids", ids.to(torch.int32)), ("logits", logits)],
                     {"generator": f"tests/golden/make_golden_llama_hf.py, transformers {transformers.__version__}, "
                                   f"torch {torch.__version__}"})
    print(f"{src}: strict load ok, logits {tuple(logits.shape)} written to {OUT}")


if __name__ == "__main__":
    main(sys.argv)
