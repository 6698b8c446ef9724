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
  bert   BertForMaskedLM as BertConfig's defaults make it (hidden_act "gelu", the exact erf
         form; layer_norm_eps 1e-12; dropout 0.1; pad_token_id 0) at small sizes (vocabulary
         1000, 2 layers, hidden 64, 4 heads, intermediate 256, 128 positions), with the files
         the tokenizer's save_pretrained writes (tokenizer.json: a WordPiece trained here
         offline with `tokenizers` on generated words; tokenizer_config.json). Its
         hf_logits.safetensors holds ids and targets I32 [B, T] (a one-segment row padded
         at the end and a two-segment row; targets -1 where nothing is predicted, some
         inputs there [MASK]) and logits F32 [B, T, V]; metadata loss = transformers'
         masked-LM loss (float64 model, token types 0 up to the first [SEP], 1 after,
         padding masked), cls/sep/mask/pad = the tokenizer's ids.
With --mantissa BIN it also fine-tunes the GPT-2 and the BERT with mantissa (`train
--init-from`, 3 steps, --dropout 0; the BERT on the golden text tokenized by `mantissa
tokenize`) and loads mantissa's saves with transformers strictly (any missing or unexpected
name is an error): hf_import_{gpt2,bert}_tuned/ hold those saves and transformers' logits.

On demand only (transformers is too heavy for CI); any transformers >= 4.40 with PyTorch 2:
  bench/torch_venv.sh && .cache/venv-bench/bin/pip install transformers safetensors tokenizers
  .cache/venv-bench/bin/python tests/golden/make_golden_hf_import.py --mantissa build/mantissa
"""
import argparse
import os
import shutil
import struct
import subprocess
import tempfile

import tokenizers
import torch
import transformers
from safetensors.torch import save_file

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
B, T = 2, 16
BT = 24  # the BERT rows' length


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


def bert_text(n_words, seed):
    """Words with Zipf-like frequencies, the words of tests/train/cli_util.hpp's word_corpus among them."""
    g = torch.Generator().manual_seed(seed)
    words = ("the quick brown fox jumps over lazy dog , . a of and to in is was he for it with as his on "
             "be at by had not are but from or have an they which one you were her all she there would "
             "their we him been has when who will more no if out so said what up its about into than them "
             "can only other new some could time these two may then do first any my now such like our over "
             "man me even most made after also did many before must through back years where much your way "
             "well down should because each just those people how too little state good very make world").split()
    weights = torch.tensor([1.0 / (k + 1) for k in range(len(words))])
    picks = torch.multinomial(weights, n_words, replacement=True, generator=g)
    return " ".join(words[i] for i in picks.tolist())


def bert_tokenizer():
    """A WordPiece tokenizer trained offline, saved as transformers saves a BERT tokenizer."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator([bert_text(20000, 3)], trainers.WordPieceTrainer(vocab_size=1000, special_tokens=specials))
    ids = {t: tok.token_to_id(t) for t in specials}
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", ids["[CLS]"]), ("[SEP]", ids["[SEP]"])])
    tok.decoder = decoders.WordPiece()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                                cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
    return fast, ids


def bert_batch(fast, ids):
    """Row 0: [CLS] A [SEP] [PAD]...; row 1: [CLS] A [SEP] B [SEP]; every 4th text token predicted, half of them masked."""
    a = fast(bert_text(9, 11), add_special_tokens=False)["input_ids"]
    b1 = fast(bert_text(12, 12), add_special_tokens=False)["input_ids"]
    b2 = fast(bert_text(12, 13), add_special_tokens=False)["input_ids"]
    rows = [[ids["[CLS]"]] + a[:9] + [ids["[SEP]"]],
            [ids["[CLS]"]] + b1[:9] + [ids["[SEP]"]] + b2[:BT - 12] + [ids["[SEP]"]]]
    rows[0] += [ids["[PAD]"]] * (BT - len(rows[0]))
    x = torch.tensor(rows, dtype=torch.long)
    targets = torch.full_like(x, -1)
    types = torch.zeros_like(x)
    for r in range(2):
        k = 0
        for t in range(BT):
            if x[r, t] in (ids["[CLS]"], ids["[SEP]"], ids["[PAD]"]):
                continue
            k += 1
            if k % 4 == 1:
                targets[r, t] = x[r, t]
                if k % 8 == 1:
                    x[r, t] = ids["[MASK]"]
        seps = (x[r] == ids["[SEP]"]).nonzero().flatten().tolist()
        types[r, seps[0] + 1:] = 1
        types[r, x[r] == ids["[PAD]"]] = 0
    return x, targets, types


def write_bert(name, model_dir, model, ids, x, targets, types):
    out = os.path.join(DATA, f"hf_import_{name}")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if os.path.exists(os.path.join(model_dir, f)):
            shutil.copyfile(os.path.join(model_dir, f), os.path.join(out, f))
    with torch.no_grad():
        m = model.double().eval()
        o = m(input_ids=x, attention_mask=(x != ids["[PAD]"]).long(), token_type_ids=types,
              labels=torch.where(targets < 0, -100, targets))
    gen = f"transformers {transformers.__version__}, torch {torch.__version__}, tokenizers {tokenizers.__version__}"
    meta = {"generator": gen, "loss": repr(float(o.loss))}
    meta.update({k.strip("[]").lower(): str(v) for k, v in ids.items() if k != "[UNK]"})
    save_file({"ids": x.to(torch.int32).contiguous(), "targets": targets.to(torch.int32).contiguous(),
               "logits": o.logits.float().contiguous()}, os.path.join(out, "hf_logits.safetensors"), metadata=meta)
    print(f"{out}: masked-LM loss {float(o.loss):.6f} ({gen})")


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

    fast, ids = bert_tokenizer()
    bert = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
        max_position_embeddings=128, pad_token_id=ids["[PAD]"])).eval()
    with torch.no_grad():
        for n, p in bert.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    bert_dir = os.path.join(work, "bert")
    bert.save_pretrained(bert_dir)
    fast.save_pretrained(bert_dir)
    x, targets, types = bert_batch(fast, ids)
    write_bert("bert", bert_dir, bert, ids, x, targets, types)

    if args.mantissa:
        text = os.path.join(work, "text.txt")
        with open(text, "w") as f:
            f.write(bert_text(30000, 4))
        bert_tokens = os.path.join(work, "bert_tokens.bin")
        subprocess.run([args.mantissa, "tokenize", "--tokenizer", os.path.join(bert_dir, "tokenizer.json"), text,
                        bert_tokens], check=True)
        tuned = os.path.join(work, "bert_tuned")
        subprocess.run([args.mantissa, "train", "--init-from", bert_dir, "--data", bert_tokens, "--steps", "3",
                        "--seq-len", "32", "--batch-size", "4", "--lr", "1e-3", "--threads", "1", "--save", tuned],
                       check=True)
        model, info = transformers.BertForMaskedLM.from_pretrained(tuned, output_loading_info=True, dtype=torch.float32)
        bad = {k: v for k, v in info.items() if v}
        if bad:
            raise SystemExit(f"{tuned}: transformers did not load it strictly: {bad}")
        write_bert("bert_tuned", tuned, model, ids, x, targets, types)

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
