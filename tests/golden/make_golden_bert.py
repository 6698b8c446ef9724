#!/usr/bin/python3
"""Write tests/golden/data/bert{,_pre}.safetensors for tests/nn/test_golden_bert.cpp.

A small BERT encoder with its masked-LM head (BertForMaskedLM layout, BRIEF section 11) written
here in plain PyTorch from the definitions (not transformers): word + token-type + position
embeddings summed and layer-normed; blocks of bidirectional multi-head attention whose padded
keys (positions >= the row's non-padding length) get -inf scores, and a GELU MLP (tanh form,
transformers' "gelu_new"); post-norm x = LN(x + f(x)) as the original BERT ("bert") or pre-norm
x = x + f(LN(x)) with a final LN ("bert_pre"); head LN(gelu(dense x)) @ word^T + bias (decoder
tied to the word embeddings). Weights are stored as transformers stores them: nn.Linear
[out, in]. LayerNorm eps 1e-5.

Tokens: bytes 0..255, then [CLS] 256, [SEP] 257, [MASK] 258, [PAD] 259. Rows are
[CLS] A [SEP] (B [SEP]) [PAD]...; token type 1 after the first [SEP] up to the padding. The
batch has rows of two segments, one segment, and mostly padding; the targets are the original
bytes at a few positions (inputs there [MASK], a random byte, or kept), -1 elsewhere.

Same file contents and AdamW protocol as make_golden.py (float64 reference from the fp32
weights; see that script's docstring). The key biases' gradient is zero in real arithmetic
(the softmax ignores q.b, the same for every key of a row), so torch_fp32_grad_rel_err, a
maximum of relative errors, is meaningless here.

Run:  /usr/bin/python3 tests/golden/make_golden_bert.py      (Debian python3-torch 1.13)
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import gelu_tanh, write  # noqa: E402

CLS, SEP, MASK, PAD = 256, 257, 258, 259


class BertConfig:
    byte_vocab = 256
    vocab_size = 260
    max_position_embeddings = 16
    type_vocab_size = 2
    hidden_size = 32
    intermediate_size = 64
    num_hidden_layers = 2
    num_attention_heads = 4


def bert_init(cfg, pre_norm, gen):
    """N(0, 0.02) matrices and tables; LN gains 1 + N(0, 0.1) and every bias N(0, 0.02), so a
    parameter loaded in the wrong place (or not at all) fails the test."""
    C, F_, V = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    p = {}

    def normal(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    def linear(name, fin, fout):
        p[name + ".weight"] = normal((fout, fin), 0.02)
        p[name + ".bias"] = normal((fout,), 0.02)

    def norm(name):
        p[name + ".weight"] = 1.0 + normal((C,), 0.1)
        p[name + ".bias"] = normal((C,), 0.02)

    p["bert.embeddings.word_embeddings.weight"] = normal((V, C), 0.02)
    p["bert.embeddings.position_embeddings.weight"] = normal((cfg.max_position_embeddings, C), 0.02)
    p["bert.embeddings.token_type_embeddings.weight"] = normal((cfg.type_vocab_size, C), 0.02)
    norm("bert.embeddings.LayerNorm")
    for i in range(cfg.num_hidden_layers):
        h = f"bert.encoder.layer.{i}."
        linear(h + "attention.self.query", C, C)
        linear(h + "attention.self.key", C, C)
        linear(h + "attention.self.value", C, C)
        linear(h + "attention.output.dense", C, C)
        norm(h + "attention.output.LayerNorm")
        linear(h + "intermediate.dense", C, F_)
        linear(h + "output.dense", F_, C)
        norm(h + "output.LayerNorm")
    if pre_norm:
        norm("bert.encoder.LayerNorm")
    linear("cls.predictions.transform.dense", C, C)
    norm("cls.predictions.transform.LayerNorm")
    p["cls.predictions.bias"] = normal((V,), 0.02)
    return p


def ln(p, name, x):
    return F.layer_norm(x, (x.shape[-1],), p[name + ".weight"], p[name + ".bias"], eps=1e-5)


def lin(p, name, x):
    return x @ p[name + ".weight"].t() + p[name + ".bias"]


def segments(idx):
    """Non-padding length per row and token types (1 after the first [SEP], 0 in the padding)."""
    lengths = (idx != PAD).sum(dim=1)
    types = torch.zeros_like(idx)
    for b in range(idx.shape[0]):
        first_sep = int((idx[b] == SEP).nonzero()[0])
        types[b, first_sep + 1:int(lengths[b])] = 1
    return lengths, types


def bert_logits(p, cfg, pre_norm, idx):
    B, T = idx.shape
    C, H = cfg.hidden_size, cfg.num_attention_heads
    D = C // H
    lengths, types = segments(idx)
    x = (p["bert.embeddings.word_embeddings.weight"][idx] + p["bert.embeddings.position_embeddings.weight"][:T]
         + p["bert.embeddings.token_type_embeddings.weight"][types])
    x = ln(p, "bert.embeddings.LayerNorm", x)
    keep = torch.arange(T)[None, :] < lengths[:, None]                 # [B, T] keys
    for i in range(cfg.num_hidden_layers):
        h = f"bert.encoder.layer.{i}."
        a = ln(p, h + "attention.output.LayerNorm", x) if pre_norm else x
        q, k, v = (lin(p, h + "attention.self." + n, a).view(B, T, H, D).transpose(1, 2)
                   for n in ("query", "key", "value"))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)                   # [B, H, T, T]
        att = att.masked_fill(~keep[:, None, None, :], float("-inf")).softmax(dim=-1)
        y = lin(p, h + "attention.output.dense", (att @ v).transpose(1, 2).reshape(B, T, C))
        x = x + y if pre_norm else ln(p, h + "attention.output.LayerNorm", x + y)
        m = ln(p, h + "output.LayerNorm", x) if pre_norm else x
        y = lin(p, h + "output.dense", gelu_tanh(lin(p, h + "intermediate.dense", m)))
        x = x + y if pre_norm else ln(p, h + "output.LayerNorm", x + y)
    if pre_norm:
        x = ln(p, "bert.encoder.LayerNorm", x)
    t = ln(p, "cls.predictions.transform.LayerNorm", gelu_tanh(lin(p, "cls.predictions.transform.dense", x)))
    return t @ p["bert.embeddings.word_embeddings.weight"].t() + p["cls.predictions.bias"]


def bert_decays(name):
    return (name.endswith(".weight") and "LayerNorm" not in name
            and "position_embeddings" not in name and "token_type_embeddings" not in name)


def batch(gen, T):
    """Three rows: two segments filling T; one segment with padding; a short row, mostly padding."""
    def text(n):
        return torch.randint(32, 127, (n,), generator=gen).tolist()
    rows = [[CLS] + text(6) + [SEP] + text(T - 9) + [SEP],
            [CLS] + text(9) + [SEP],
            [CLS] + text(2) + [SEP] + text(1) + [SEP]]
    idx = torch.tensor([r + [PAD] * (T - len(r)) for r in rows], dtype=torch.int64)
    targets = torch.full((3, T), -1, dtype=torch.int64)
    # (row, position, input written there): [MASK], a random byte, or the byte kept.
    for b, t, how in [(0, 2, "mask"), (0, 9, "mask"), (0, 13, "random"), (0, 5, "keep"),
                      (1, 1, "mask"), (1, 7, "random"), (1, 8, "keep"), (2, 1, "mask"), (2, 4, "mask")]:
        targets[b, t] = idx[b, t]
        if how == "mask":
            idx[b, t] = MASK
        elif how == "random":
            idx[b, t] = (idx[b, t] + 17) % 256
    return idx, targets


def main():
    torch.set_num_threads(1)
    cfg = BertConfig()
    for name, pre_norm, seed in (("bert", False, 2468), ("bert_pre", True, 1357)):
        gen = torch.Generator().manual_seed(seed)
        params = bert_init(cfg, pre_norm, gen)
        T = cfg.max_position_embeddings
        inputs, targets = batch(gen, T)
        write(name, params, lambda p, pn=pre_norm, x=inputs: bert_logits(p, cfg, pn, x), inputs.to(torch.int32),
              targets, bert_decays,
              dict(model="bert", byte_vocab=cfg.byte_vocab, vocab_size=cfg.vocab_size, max_position_embeddings=T,
                   type_vocab_size=cfg.type_vocab_size, hidden_size=cfg.hidden_size,
                   intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
                   num_attention_heads=cfg.num_attention_heads, norm="pre" if pre_norm else "post",
                   batch=3, seq_len=T))


if __name__ == "__main__":
    sys.exit(main())
