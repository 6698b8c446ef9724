#!/usr/bin/env python3
"""Goldens from Hugging Face transformers' own BertForMaskedLM for tests/nn/test_hf_bert.cpp.

Loads a directory mantissa saved (`mantissa train --model bert --save DIR`: config.json +
model.safetensors) with BertForMaskedLM.from_pretrained, strictly: any missing or unexpected
parameter name is an error (the decoder weight and bias are tied to the word embeddings and
cls.predictions.bias, as transformers ties them). Then computes float32 logits for a fixed
batch of right-padded rows [CLS] A [SEP] (B [SEP]) [PAD]... with the token types and attention
mask mantissa reads from the ids, and writes tests/golden/data/bert_hf/ = the model directory
(config.json, model.safetensors) plus hf_logits.safetensors (ids I32 [B, T], logits F32
[B, T, V], generator in metadata). The C++ test loads the directory with mantissa and compares
its logits with these at the non-padding positions.

On demand only (transformers is too heavy for CI). transformers 4.36 runs on Debian's PyTorch:
  /usr/bin/python3 -m venv --system-site-packages .cache/hfvenv
  .cache/hfvenv/bin/pip install transformers==4.36.2
  .cache/hfvenv/bin/python tests/golden/make_golden_bert_hf.py SAVED_DIR
"""
import json
import os
import sys

import torch
from transformers import BertForMaskedLM

import hf_golden


def main(argv):
    src = hf_golden.source_dir(argv, "make_golden_bert_hf.py")
    with open(os.path.join(src, "config.json")) as f:
        extra = json.load(f)["mantissa"]
    if extra.get("norm") != "post":
        sys.exit(f"{src}: transformers' BERT is post-norm; this model is {extra.get('norm')}-norm")
    cls, sep, pad = extra["cls_token_id"], extra["sep_token_id"], extra["byte_vocab"] + 3
    model = hf_golden.load_strictly(BertForMaskedLM, src)
    gen = torch.Generator().manual_seed(77)
    T = model.config.max_position_embeddings
    rows = []
    for n_a, n_b in ((T // 3, T - T // 3 - 3), (T // 2, 0), (3, 2)):
        text = torch.randint(32, 127, (n_a + n_b,), generator=gen).tolist()
        r = [cls] + text[:n_a] + [sep] + (text[n_a:] + [sep] if n_b else [])
        rows.append(r + [pad] * (T - len(r)))
    ids = torch.tensor(rows, dtype=torch.int64)
    mask = (ids != pad).long()
    types = torch.zeros_like(ids)
    for b in range(ids.shape[0]):
        first = int((ids[b] == sep).nonzero()[0])
        types[b, first + 1:int(mask[b].sum())] = 1
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits.float()
    hf_golden.write("bert", src, ids, logits, "make_golden_bert_hf.py")


if __name__ == "__main__":
    main(sys.argv)
