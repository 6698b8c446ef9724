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
import sys

import torch
from transformers import LlamaForCausalLM

import hf_golden


def main(argv):
    src = hf_golden.source_dir(argv, "make_golden_llama_hf.py")
    model = hf_golden.load_strictly(LlamaForCausalLM, src)
    gen = torch.Generator().manual_seed(99)
    B, T = 2, model.config.max_position_embeddings
    ids = torch.randint(0, model.config.vocab_size, (B, T), generator=gen)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    hf_golden.write("llama", src, ids, logits, "make_golden_llama_hf.py")


if __name__ == "__main__":
    main(sys.argv)
