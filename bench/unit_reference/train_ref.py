"""Reference runs for the unit-scaled GPT: the same model shape, bytes, split, batch, schedule and AdamW
settings as `mantissa train --recipe fp32|unit-fp32`, trained in PyTorch, the unit model built from
Graphcore's `unit-scaling` library (its modules, functional ops and u-muP optimizer), so the gap
between unit-scaled and standard training can be measured independently of mantissa.

  python bench/unit_reference/train_ref.py --model standard|unit --steps 1000 --warmup 50 \
      --eval-every 100 --seed 1337 [--lr X] [--out run.jsonl]

Models (byte-level, vocabulary 256, 4 blocks, d_model 256, 4 heads, context 128 by default):
  standard  pre-LN GPT-2 layout as mantissa's fp32 GPT: tied head, tanh GELU, LayerNorm with affine,
            biases, init N(0, 0.02) (projections 0.02/sqrt(2L)), AdamW lr 1e-3 (min lr/10), betas
            (0.9, 0.99), eps 1e-8, decoupled weight decay 0.1 on the 2-D weights but wpe, clip 1.
  unit      the same layout with unit_scaling modules: uu.Embedding (wte, wpe) joined by U.add,
            per block U.residual_split/residual_add (library auto taus: 0.01 around attention, 0.5
            around the MLP), uu.LayerNorm with affine, uu.Linear with bias, U.scaled_dot_product_attention
            (causal, mult 1), uu.GELU (tanh), ln_f, untied uu.LinearReadout, U.cross_entropy; blocks in a
            uu.DepthModuleList (depth L for the u-muP LR rule); optimizer uu.optim.AdamW (u-muP Adam
            rules, independent weight decay 1e-4 per step at peak on the same parameters as mantissa),
            lr 2^-1 (mantissa's unit default), no clipping.
Data: the first size - floor(0.1 size) bytes train (windows at uniform random starts), the rest validate
(the first eval_batches x batch windows at offsets k T, every target counted), val bpc = mean nats / ln 2,
as mantissa's TextValidation. The training windows' random stream differs from mantissa's (another RNG).
Prints one JSON line per evaluation; --out writes them too.
"""
import argparse
import json
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def decayed(name, p):
    """mantissa's weight-decay flags: the embeddings and matrices but wpe."""
    return p.dim() == 2 and not name.startswith("wpe")


# ---- standard GPT (mantissa's fp32 model) ----------------------------------------------------------
class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1, self.ln_2 = nn.LayerNorm(C, eps=1e-5), nn.LayerNorm(C, eps=1e-5)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, C, L, H):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        for name, p in self.named_parameters():  # GPT-2 init, zero biases
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith(".bias"):
                nn.init.zeros_(p)

    def logits(self, idx):
        x = self.wte(idx) + self.wpe.weight[: idx.shape[1]]
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()

    def loss(self, idx, targets):
        return F.cross_entropy(self.logits(idx).flatten(0, 1), targets.flatten())

    def param_groups(self, args):
        # One group per parameter (as the unit optimizer), so --lr-mult can reach each.
        return torch.optim.AdamW([{"params": [p], "weight_decay": args.weight_decay if decayed(n, p) else 0.0}
                                  for n, p in self.named_parameters()], lr=args.lr, betas=(0.9, 0.99), eps=1e-8)


# ---- unit-scaled GPT from the library's modules ----------------------------------------------------
def unit_gpt(V, T, C, L, H, tau_attn, tau_mlp, attn_mult):
    import unit_scaling as uu
    import unit_scaling.functional as U

    class UnitBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = uu.LayerNorm(C, elementwise_affine=True)
            self.c_attn = uu.Linear(C, 3 * C, bias=True)
            self.c_proj = uu.Linear(C, C, bias=True)
            self.ln_2 = uu.LayerNorm(C, elementwise_affine=True)
            self.c_fc = uu.Linear(C, 4 * C, bias=True)
            self.gelu = uu.GELU(approximate="tanh")
            self.mlp_proj = uu.Linear(4 * C, C, bias=True)

        def forward(self, x, obs):  # obs(name, tensor) -> tensor: mantissa's op names
            B, T_, _ = x.shape
            r, skip = U.residual_split(x, tau_attn)
            qkv = obs("attn.qkv", self.c_attn(obs("attn.ln", self.ln_1(r))))
            q, k, v = (t.view(B, T_, H, C // H).transpose(1, 2) for t in qkv.split(C, dim=2))
            y = U.scaled_dot_product_attention(q, k, v, is_causal=True, mult=attn_mult)
            y = obs("attn.proj", self.c_proj(obs("attn.sdpa", y.transpose(1, 2).reshape(B, T_, C))))
            x = obs("attn.residual", U.residual_add(y, skip, tau_attn))
            r, skip = U.residual_split(x, tau_mlp)
            f = obs("mlp.gelu", self.gelu(obs("mlp.fc", self.c_fc(obs("mlp.ln", self.ln_2(r))))))
            return obs("mlp.residual", U.residual_add(obs("mlp.proj", self.mlp_proj(f)), skip, tau_mlp))

    class UnitGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = uu.Embedding(V, C), uu.Embedding(T, C)  # N(0, 1)
            self.h = uu.DepthModuleList([UnitBlock() for _ in range(L)])
            self.ln_f = uu.LayerNorm(C, elementwise_affine=True)
            self.lm_head = uu.LinearReadout(C, V)
            for m in self.modules():  # N(0, 1) weights, zero biases (the modules' own reset)
                if isinstance(m, uu.Linear):
                    m.reset_parameters()

        def logits(self, idx, obs=lambda name, t: t):
            pos = torch.arange(idx.shape[1])
            x = obs("embedding", U.add(self.wte(idx), self.wpe(pos)))
            for i, block in enumerate(self.h):
                x = block(x, lambda name, t, i=i: obs(f"h{i}.{name}", t))
            return obs("logits", self.lm_head(obs("ln_f", self.ln_f(x))))

        def loss(self, idx, targets, obs=lambda name, t: t):
            return U.cross_entropy(self.logits(idx, obs).flatten(0, 1), targets.flatten())

        def param_groups(self, args):
            groups = [{"params": [p], "weight_decay": args.unit_weight_decay if decayed(n, p) else 0.0}
                      for n, p in self.named_parameters()]
            return uu.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.99), eps=1e-8)

    return UnitGPT()


# ---- parameter groups and their step sizes ------------------------------------------------------------
GROUPS = ("embedding", "weight", "proj", "norm", "bias", "readout")


def param_group(name, p):
    if name.startswith(("wte", "wpe")):
        return "embedding"
    if name.startswith("lm_head"):
        return "readout"
    if name.endswith(".bias"):
        return "bias"
    if p.dim() == 1:
        return "norm"
    return "proj" if name.endswith("proj.weight") else "weight"


def relative_updates(model, before):
    """Per group: RMS of this step's change over RMS of the value before it (biases: RMS of the change)."""
    acc = {}
    for (name, p), old in zip(model.named_parameters(), before):
        g = param_group(name, p)
        d, v, n = acc.get(g, (0.0, 0.0, 0))
        acc[g] = (d + (p.detach() - old).double().pow(2).sum().item(), v + old.double().pow(2).sum().item(),
                  n + p.numel())
    return {g: float(f"{(d / n if g == 'bias' else d / v) ** 0.5:.4g}") for g, (d, v, n) in acc.items()}


# ---- data, schedule, evaluation ----------------------------------------------------------------------
def load_split(path, val_fraction=0.1):
    data = np.frombuffer(open(path, "rb").read(), dtype=np.uint8)
    held_out = int(math.floor(len(data) * val_fraction))
    return torch.from_numpy(data[: len(data) - held_out].astype(np.int64)), \
        torch.from_numpy(data[len(data) - held_out:].astype(np.int64))


def lr_factor(step, warmup, steps, min_ratio):
    """mantissa's LrSchedule::at(step) / max_lr."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if steps <= warmup:
        return 1.0
    if step > steps:
        return min_ratio
    ratio = (step - warmup) / (steps - warmup)
    return min_ratio + 0.5 * (1 + math.cos(math.pi * ratio)) * (1 - min_ratio)


@torch.no_grad()
def val_bpc(model, val, B, T, batches):
    n_windows = min(batches * B, (len(val) - 1) // T)
    total, count = 0.0, 0
    for first in range(0, n_windows, B):
        starts = torch.arange(first, min(first + B, n_windows)) * T
        idx = torch.stack([val[s: s + T] for s in starts])
        tgt = torch.stack([val[s + 1: s + T + 1] for s in starts])
        total += F.cross_entropy(model.logits(idx).flatten(0, 1).double(), tgt.flatten(), reduction="sum").item()
        count += tgt.numel()
    return total / count / math.log(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["standard", "unit"], required=True)
    ap.add_argument("--data", default=".cache/data/austen.txt")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--stop-after", type=int, default=0, help="stop after N steps; the schedule still spans --steps")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-batches", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--lr", type=float, default=None, help="peak lr (standard 1e-3, unit 2^-1)")
    ap.add_argument("--weight-decay", type=float, default=0.1, help="standard: decoupled AdamW decay")
    ap.add_argument("--unit-weight-decay", type=float, default=1e-4,
                    help="unit: per-step decay at peak lr (independent of the lr, as mantissa's 0.1 x 1e-3)")
    ap.add_argument("--tau-attn", type=float, default=0.01)
    ap.add_argument("--tau-mlp", type=float, default=0.5)
    ap.add_argument("--attn-mult", type=float, default=1.0)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--lr-mult", action="append", default=[], metavar="GROUP=X",
                    help="multiply the lr of one parameter group (embedding, weight, proj, norm, bias, readout)")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    for name in ("steps", "eval_every", "eval_batches", "layers", "d_model", "heads", "seq_len", "batch_size", "threads"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.d_model % args.heads:
        ap.error(f"--d-model {args.d_model} is not divisible by --heads {args.heads}")
    if args.lr is None:
        args.lr = 1e-3 if args.model == "standard" else 0.5
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    train, val = load_split(args.data)
    B, T = args.batch_size, args.seq_len
    if len(train) < T + 1 or len(val) < T + 1:
        sys.exit(f"train_ref.py: {args.data} is too short for --seq-len {T}")
    V, C, L, H = 256, args.d_model, args.layers, args.heads
    if args.model == "standard":
        model = GPT(V, T, C, L, H)
    else:
        model = unit_gpt(V, T, C, L, H, args.tau_attn, args.tau_mlp, args.attn_mult)
    opt = model.param_groups(args)
    for spec in args.lr_mult:
        group, _, mult = spec.partition("=")
        if group not in GROUPS or not mult:
            ap.error(f"--lr-mult {spec}: want GROUP=X with GROUP one of {', '.join(GROUPS)}")
        names = {id(p): n for n, p in model.named_parameters()}
        for g in opt.param_groups:  # one group per parameter
            if param_group(names[id(g["params"][0])], g["params"][0]) == group:
                g["lr"] *= float(mult)
                if args.model == "unit":
                    g["weight_decay"] /= float(mult)  # independent decay: the per-step decay stays
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, args.warmup, args.steps, 0.1))
    clip = 1.0 if args.model == "standard" else 0.0
    gen = np.random.default_rng(args.seed)
    out = open(args.out, "w") if args.out else None
    t0 = time.time()

    def report(rec):
        line = json.dumps(rec)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    last = min(args.steps, args.stop_after) if args.stop_after > 0 else args.steps
    for step in range(1, last + 1):
        starts = gen.integers(0, len(train) - T, size=B)
        idx = torch.stack([train[s: s + T] for s in starts])
        tgt = torch.stack([train[s + 1: s + T + 1] for s in starts])
        evaluate = step % args.eval_every == 0 or step == last
        before = [p.detach().clone() for p in model.parameters()] if evaluate else None
        opt.zero_grad(set_to_none=True)
        loss = model.loss(idx, tgt)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sched.step()
        if not math.isfinite(loss.item()):
            sys.exit(f"train_ref.py: non-finite loss at step {step}")
        if evaluate:
            report({"model": args.model, "seed": args.seed, "step": step, "train_loss": round(loss.item(), 5),
                    "val_bpc": round(val_bpc(model, val, B, T, args.eval_batches), 5),
                    "lr": args.lr, "lr_mult": args.lr_mult, "seconds": round(time.time() - t0, 1),
                    "torch": torch.__version__, "relative_update": relative_updates(model, before)})


if __name__ == "__main__":
    main()
