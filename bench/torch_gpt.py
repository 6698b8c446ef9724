#!/usr/bin/python3
"""PyTorch reference for bench/run_train_vs_torch.sh: one GPT-2-layout (or, --model llama, Llama) training step
(forward + backward + AdamW) on random byte tokens, timed in fp32 and in autocast bf16.

The model is the one mantissa trains (pre-LN blocks, tanh GELU, causal attention, tied head,
LN eps 1e-5), written with PyTorch's own fused ops (nn.Linear, F.layer_norm, F.gelu(tanh),
F.cross_entropy) so PyTorch runs its fastest CPU path, not a hand-rolled one.
Prints one JSON object: tokens_per_s_fp32, tokens_per_s_bf16, step_ms_*, torch_version, threads.
With --sdpa attention is F.scaled_dot_product_attention (is_causal, PyTorch 2.x's fused CPU
kernel); with --compile the model (forward and backward) goes through torch.compile (inductor,
needs a C++ compiler), warm-up steps include the compilation.

  /usr/bin/python3 bench/torch_gpt.py --threads 2 [--layers 4 --d-model 256 --heads 4
                                        --seq-len 128 --batch 16 --vocab 256 --steps 10 --warmup 3]
                                        [--sdpa] [--compile]
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H, sdpa=False):
        super().__init__()
        self.H = H
        self.sdpa = sdpa
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
            att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, C, L, H, sdpa=False):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H, sdpa) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1))
        for name, p in self.named_parameters():  # GPT-2 init
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe.weight[:T]
        for block in self.h:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1),
                               ignore_index=-1)


class RMSNorm(nn.Module):
    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(C))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()  # in fp32, as transformers' LlamaRMSNorm
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class LlamaBlock(nn.Module):
    """transformers' LlamaDecoderLayer: RMSNorm, q/k/v/o without bias, rotary (rotate_half), SwiGLU."""
    def __init__(self, C, H, F_):
        super().__init__()
        self.H = H
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(C), RMSNorm(C)
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(C, C, bias=False) for _ in range(4))
        self.gate_proj, self.up_proj = nn.Linear(C, F_, bias=False), nn.Linear(C, F_, bias=False)
        self.down_proj = nn.Linear(F_, C, bias=False)

    def forward(self, x, mask, cos, sin):
        B, T, C = x.shape
        h = self.input_layernorm(x)
        q, k, v = (p(h).view(B, T, self.H, C // self.H).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))

        def rot(t):
            half = t.shape[-1] // 2
            return t * cos + torch.cat((-t[..., half:], t[..., :half]), dim=-1) * sin
        q, k = rot(q), rot(k)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        att = att.masked_fill(mask[:T, :T], float("-inf")).softmax(dim=-1)
        x = x + self.o_proj((att @ v).transpose(1, 2).reshape(B, T, C))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, V, T, C, L, H):
        super().__init__()
        F_ = 64 * max(1, round(8 * C / 3 / 64))  # mantissa's default SwiGLU width
        self.embed_tokens = nn.Embedding(V, C)
        self.layers = nn.ModuleList(LlamaBlock(C, H, F_) for _ in range(L))
        self.norm = RMSNorm(C)
        self.lm_head = nn.Linear(C, V, bias=False)
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1))
        D = C // H
        ang = torch.arange(T, dtype=torch.float32)[:, None] * (10000.0 ** (-torch.arange(0, D, 2).float() / D))[None]
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos())
        self.register_buffer("sin", ang.sin())
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.embed_tokens(idx)
        for block in self.layers:
            x = block(x, self.mask, self.cos[:T], self.sin[:T])
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def time_steps(args, bf16):
    torch.manual_seed(0)
    if args.model == "llama":
        model = Llama(args.vocab, args.seq_len, args.d_model, args.layers, args.heads)
    else:
        model = GPT(args.vocab, args.seq_len, args.d_model, args.layers, args.heads, args.sdpa)
    run = torch.compile(model) if args.compile else model
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-8, foreach=args.foreach)
    gen = torch.Generator().manual_seed(1)
    times, losses = [], []
    for step in range(args.warmup + args.steps):
        data = torch.randint(0, args.vocab, (args.batch, args.seq_len + 1), generator=gen)
        idx, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = run(idx, targets)
        loss.backward()
        opt.step()
        elapsed = time.perf_counter() - t0
        losses.append(float(loss.detach()))
        if step >= args.warmup:
            times.append(elapsed)
    if not all(math.isfinite(x) for x in losses):
        sys.exit(f"torch_gpt.py: non-finite loss {losses}")
    med = statistics.median(times)
    return args.batch * args.seq_len / med, med * 1e3, losses[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["gpt", "llama"], default="gpt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10, help="timed steps (median reported)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--precision", choices=["both", "fp32", "bf16"], default="both")
    ap.add_argument("--foreach", action=argparse.BooleanOptionalAction, default=True,
                    help="multi-tensor AdamW (PyTorch's faster optimizer path)")
    ap.add_argument("--sdpa", action="store_true", help="F.scaled_dot_product_attention (PyTorch 2.x)")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (PyTorch 2.x)")
    args = ap.parse_args()
    if (args.sdpa or args.compile) and int(torch.__version__.split(".")[0]) < 2:
        ap.error(f"--sdpa/--compile need PyTorch 2.x, this is {torch.__version__}")
    for name in ("threads", "layers", "d_model", "heads", "seq_len", "batch", "vocab", "steps"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.d_model % args.heads:
        ap.error(f"--d-model {args.d_model} is not divisible by --heads {args.heads}")
    torch.set_num_threads(args.threads)

    out = {"model": args.model, "torch_version": torch.__version__, "threads": torch.get_num_threads(),
           "layers": args.layers, "d_model": args.d_model, "heads": args.heads,
           "seq_len": args.seq_len, "batch": args.batch, "vocab": args.vocab,
           "steps": args.steps, "warmup": args.warmup, "adamw_foreach": args.foreach,
           "sdpa": args.sdpa, "compile": args.compile,
           "cpu_capability": getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "")()}
    for prec in ("fp32", "bf16"):
        if args.precision in (prec, "both"):
            tps, ms, loss0 = time_steps(args, prec == "bf16")
            out[f"tokens_per_s_{prec}"] = round(tps, 1)
            out[f"step_ms_{prec}"] = round(ms, 3)
            out[f"first_loss_{prec}"] = round(loss0, 4)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
