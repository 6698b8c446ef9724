#!/usr/bin/python3
"""Write tests/golden/data/llama.safetensors for tests/nn/test_golden_llama.cpp.

A small Llama-style decoder (LlamaForCausalLM layout) written here in plain
PyTorch from the definitions (not transformers): RMSNorm x * rsqrt(mean(x^2) + eps) * w,
rotary positions with rotate_half (dimension i pairs with i + d_head/2, angle pos *
theta^(-2i/d_head)), grouped-query attention (4 query heads on 2 kv heads), SwiGLU MLP
down(silu(gate x) * up x), no biases, untied lm_head. Weights are stored as transformers
stores them: nn.Linear [out, in]. Same file contents and AdamW protocol as make_golden.py
(float64 reference from the fp32 weights; see that script's docstring).

Run:  /usr/bin/python3 tests/golden/make_golden_llama.py      (Debian python3-torch 1.13)
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import write  # noqa: E402


class LlamaConfig:
    vocab_size = 256
    max_position_embeddings = 16
    hidden_size = 32
    intermediate_size = 64
    num_hidden_layers = 2
    num_attention_heads = 4
    num_key_value_heads = 2
    rms_norm_eps = 1e-5
    rope_theta = 10000.0


def llama_init(cfg, gen):
    """N(0, 0.02) matrices; RMSNorm gains 1 + N(0, 0.1) so a misplaced gain fails the test."""
    C, F_, D = cfg.hidden_size, cfg.intermediate_size, cfg.hidden_size // cfg.num_attention_heads
    KC = cfg.num_key_value_heads * D
    p = {}

    def normal(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    p["model.embed_tokens.weight"] = normal((cfg.vocab_size, C), 0.02)
    for i in range(cfg.num_hidden_layers):
        h = f"model.layers.{i}."
        p[h + "input_layernorm.weight"] = 1.0 + normal((C,), 0.1)
        p[h + "self_attn.q_proj.weight"] = normal((C, C), 0.02)
        p[h + "self_attn.k_proj.weight"] = normal((KC, C), 0.02)
        p[h + "self_attn.v_proj.weight"] = normal((KC, C), 0.02)
        p[h + "self_attn.o_proj.weight"] = normal((C, C), 0.02)
        p[h + "post_attention_layernorm.weight"] = 1.0 + normal((C,), 0.1)
        p[h + "mlp.gate_proj.weight"] = normal((F_, C), 0.02)
        p[h + "mlp.up_proj.weight"] = normal((F_, C), 0.02)
        p[h + "mlp.down_proj.weight"] = normal((C, F_), 0.02)
    p["model.norm.weight"] = 1.0 + normal((C,), 0.1)
    p["lm_head.weight"] = normal((cfg.vocab_size, C), 0.02)
    return p


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x, theta):
    """x [B, H, T, D]: x cos + rotate_half(x) sin with angle pos * theta^(-2i/D), i < D/2."""
    T, D = x.shape[-2], x.shape[-1]
    inv = theta ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]   # [T, D/2]
    ang = torch.cat((ang, ang), dim=-1).to(x.dtype)                      # [T, D]
    return x * ang.cos() + rotate_half(x) * ang.sin()


def llama_logits(p, cfg, idx):
    B, T = idx.shape
    C, H, KV = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
    D = C // H
    x = p["model.embed_tokens.weight"][idx]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(cfg.num_hidden_layers):
        h = f"model.layers.{i}."
        a = rms_norm(x, p[h + "input_layernorm.weight"], cfg.rms_norm_eps)
        q = (a @ p[h + "self_attn.q_proj.weight"].t()).view(B, T, H, D).transpose(1, 2)
        k = (a @ p[h + "self_attn.k_proj.weight"].t()).view(B, T, KV, D).transpose(1, 2)
        v = (a @ p[h + "self_attn.v_proj.weight"].t()).view(B, T, KV, D).transpose(1, 2)
        q, k = rope(q, cfg.rope_theta), rope(k, cfg.rope_theta)
        k = k.repeat_interleave(H // KV, dim=1)  # query head j reads kv head j // (H/KV)
        v = v.repeat_interleave(H // KV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[h + "self_attn.o_proj.weight"].t()
        m = rms_norm(x, p[h + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
        g = F.silu(m @ p[h + "mlp.gate_proj.weight"].t()) * (m @ p[h + "mlp.up_proj.weight"].t())
        x = x + g @ p[h + "mlp.down_proj.weight"].t()
    x = rms_norm(x, p["model.norm.weight"], cfg.rms_norm_eps)
    return x @ p["lm_head.weight"].t()


def llama_decays(name):
    return name.endswith(".weight") and "norm" not in name


def main():
    torch.set_num_threads(1)
    cfg = LlamaConfig()
    gen = torch.Generator().manual_seed(4321)
    params = llama_init(cfg, gen)
    B, T = 2, cfg.max_position_embeddings
    inputs = torch.randint(0, cfg.vocab_size, (B, T), generator=gen, dtype=torch.int64)
    targets = torch.roll(inputs, -1, dims=1)
    targets[:, -1] = torch.randint(0, cfg.vocab_size, (B,), generator=gen)
    targets[0, 5] = -1
    targets[1, 0] = -1
    write("llama", params, lambda p: llama_logits(p, cfg, inputs), inputs.to(torch.int32), targets,
          llama_decays,
          dict(model="llama", vocab_size=cfg.vocab_size, max_position_embeddings=T,
               hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
               num_hidden_layers=cfg.num_hidden_layers, num_attention_heads=cfg.num_attention_heads,
               num_key_value_heads=cfg.num_key_value_heads, rms_norm_eps=repr(cfg.rms_norm_eps),
               rope_theta=repr(cfg.rope_theta), batch=B, seq_len=T))


if __name__ == "__main__":
    sys.exit(main())
