#!/usr/bin/python3
"""Write the golden files the C++ tests tests/nn/test_golden_{gpt,mlp}.cpp compare against.

In the style of llm.c's test_gpt2: a small GPT with the exact GPT-2 layout and a small MLP,
written in plain PyTorch, seeded, and every number the C++ side must reproduce dumped to
tests/golden/data/{gpt,mlp}.safetensors:

  inputs, targets                 the batch (I32; GPT targets use -1 = ignored)
  <HF parameter name>             every parameter, F32, Conv1D/linear weights stored [in, out]
  logits                          F32, computed in float64 from those fp32 weights
  loss_per_target                 F32 [B*T] (GPT) / [B] (MLP), 0 where the target is ignored
  grad.<HF parameter name>        F32, d(mean loss)/d(param), computed in float64
and in the header's __metadata__ (strings; numbers as exact decimal doubles / JSON lists):
  loss_sum, loss_count, loss_mean sum of per-target cross-entropy (nats), count, mean
  adamw_losses                    [10] mean loss before each of 10 AdamW steps on the batch
  torch_fp32_adamw_losses         [10] the same 10 steps run by PyTorch in float32
  torch_fp32_grad_rel_err         max over params of max|g32-g64| / max|g64| (what PyTorch's own
                                  fp32 run misses by; a floor for a sensible test tolerance)
  decay, adamw, model config      the decayed parameter names, optimizer settings, sizes

References are computed in float64 (inputs are the fp32 weights widened exactly), so a C++ fp32
implementation is compared against the truth, not against another fp32 rounding.

AdamW (torch.optim.AdamW semantics, which mantissa's AdamW follows): lr 1e-3, betas (0.9, 0.999),
eps 1e-8, weight_decay 0.01 applied decoupled (p *= 1 - lr*wd) to the parameters whose
Parameter::decay is true in mantissa: every weight matrix including the tied token embedding
wte; NOT biases, LayerNorm gains/biases, or the position embedding wpe. The decayed names are
listed in the file's metadata ("decay") and the C++ test checks mantissa's flags against it.

Run:  /usr/bin/python3 tests/golden/make_golden.py      (Debian python3-torch 1.13)
Deterministic: same bytes on every run (fixed seeds, float64 math, no threads-dependent sums
at the precision stored).
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "data")

ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
ADAMW_STEPS = 10


# ----------------------------------------------------------------------------- safetensors
def save_safetensors(path, tensors, metadata):
    """tensors: list of (name, torch tensor). Writes header + raw little-endian data via a temp
    file renamed into place."""
    dtype_names = {torch.float32: "F32", torch.int32: "I32"}
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs, offset = [], 0
    for name, t in tensors:
        t = t.detach().contiguous().cpu()
        raw = t.numpy().astype(t.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": dtype_names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * ((8 - len(head) % 8) % 8)  # keep data 8-byte aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
    print(f"wrote {os.path.relpath(path)}: {8 + len(head) + offset} bytes, {len(tensors)} tensors")


# ----------------------------------------------------------------------------- GPT-2
class GPTConfig:
    vocab_size = 256
    n_positions = 16
    n_embd = 32
    n_layer = 2
    n_head = 2


def gpt_init(cfg, gen):
    """GPT-2 initialisation: N(0, 0.02), residual projections N(0, 0.02/sqrt(2L)), LN gains 1.
    Biases and LN parameters get small random values too, so that a test loading them in the
    wrong place (or not at all) fails."""
    C, L = cfg.n_embd, cfg.n_layer
    p = {}

    def normal(shape, std):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std

    p["transformer.wte.weight"] = normal((cfg.vocab_size, C), 0.02)
    p["transformer.wpe.weight"] = normal((cfg.n_positions, C), 0.01)
    for i in range(L):
        h = f"transformer.h.{i}."
        p[h + "ln_1.weight"] = 1.0 + normal((C,), 0.1)
        p[h + "ln_1.bias"] = normal((C,), 0.02)
        p[h + "attn.c_attn.weight"] = normal((C, 3 * C), 0.02)
        p[h + "attn.c_attn.bias"] = normal((3 * C,), 0.02)
        p[h + "attn.c_proj.weight"] = normal((C, C), 0.02 / math.sqrt(2 * L))
        p[h + "attn.c_proj.bias"] = normal((C,), 0.02)
        p[h + "ln_2.weight"] = 1.0 + normal((C,), 0.1)
        p[h + "ln_2.bias"] = normal((C,), 0.02)
        p[h + "mlp.c_fc.weight"] = normal((C, 4 * C), 0.02)
        p[h + "mlp.c_fc.bias"] = normal((4 * C,), 0.02)
        p[h + "mlp.c_proj.weight"] = normal((4 * C, C), 0.02 / math.sqrt(2 * L))
        p[h + "mlp.c_proj.bias"] = normal((C,), 0.02)
    p["transformer.ln_f.weight"] = 1.0 + normal((C,), 0.1)
    p["transformer.ln_f.bias"] = normal((C,), 0.02)
    return p


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gpt_logits(p, cfg, idx):
    """idx [B,T] int64 -> logits [B,T,V]. Conv1D: y = x @ W[in,out] + b. Head tied to wte."""
    B, T = idx.shape
    C, H = cfg.n_embd, cfg.n_head
    x = p["transformer.wte.weight"][idx] + p["transformer.wpe.weight"][:T]      # [B,T,C]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(cfg.n_layer):
        h = f"transformer.h.{i}."
        a = F.layer_norm(x, (C,), p[h + "ln_1.weight"], p[h + "ln_1.bias"], eps=1e-5)
        qkv = a @ p[h + "attn.c_attn.weight"] + p[h + "attn.c_attn.bias"]       # [B,T,3C]
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))  # [B,H,T,hs]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)                     # [B,H,T,T]
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p[h + "attn.c_proj.weight"] + p[h + "attn.c_proj.bias"]
        m = F.layer_norm(x, (C,), p[h + "ln_2.weight"], p[h + "ln_2.bias"], eps=1e-5)
        m = gelu_tanh(m @ p[h + "mlp.c_fc.weight"] + p[h + "mlp.c_fc.bias"])   # [B,T,4C]
        x = x + m @ p[h + "mlp.c_proj.weight"] + p[h + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps=1e-5)
    return x @ p["transformer.wte.weight"].t()                                    # [B,T,V]


def gpt_decays(name):
    return name.endswith(".weight") and ".ln_" not in name and name != "transformer.wpe.weight"


# ----------------------------------------------------------------------------- MLP
MLP_SIZES = [20, 16, 10]  # features -> hidden (ReLU) -> classes


def mlp_init(gen):
    p = {}
    for i, (fin, fout) in enumerate(zip(MLP_SIZES[:-1], MLP_SIZES[1:])):
        bound = 1.0 / math.sqrt(fin)
        p[f"layers.{i}.weight"] = (torch.rand((fin, fout), generator=gen) * 2 - 1) * bound
        p[f"layers.{i}.bias"] = (torch.rand((fout,), generator=gen) * 2 - 1) * bound
    return p


def mlp_logits(p, x):
    n = len(MLP_SIZES) - 1
    for i in range(n):
        x = x @ p[f"layers.{i}.weight"] + p[f"layers.{i}.bias"]
        if i + 1 < n:
            x = torch.relu(x)
    return x


def mlp_decays(name):
    return name.endswith(".weight")


# ----------------------------------------------------------------------------- shared driver
def loss_parts(logits, targets):
    """Per-target cross-entropy (0 where ignored), sum and count of non-ignored targets."""
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_targets = targets.reshape(-1).long()
    per = F.cross_entropy(flat_logits, flat_targets, ignore_index=-1, reduction="none")
    count = int((flat_targets != -1).sum())
    return per, per.sum(), count


def run(params32, logits_fn, targets, decays, dtype):
    """Forward + backward of the mean loss in `dtype`, then 10 AdamW steps from the same start."""
    p = {k: v.to(dtype).clone().requires_grad_(True) for k, v in params32.items()}
    logits = logits_fn(p)
    per, total, count = loss_parts(logits, targets)
    (total / count).backward()
    grads = {k: v.grad.detach().clone() for k, v in p.items()}

    q = {k: v.to(dtype).clone().requires_grad_(True) for k, v in params32.items()}
    decay = [v for k, v in q.items() if decays(k)]
    no_decay = [v for k, v in q.items() if not decays(k)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": ADAMW["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"],
                            foreach=False)
    losses = []
    for _ in range(ADAMW_STEPS):
        opt.zero_grad(set_to_none=True)
        _, s, c = loss_parts(logits_fn(q), targets)
        loss = s / c
        loss.backward()
        opt.step()
        losses.append(float(loss))
    return logits.detach(), per.detach(), float(total), count, grads, losses


def write(name, params32, logits_fn, inputs, targets, decays, config):
    ref_logits, per, total, count, g64, losses64 = run(params32, logits_fn, targets, decays,
                                                       torch.float64)
    _, _, total32, _, g32, losses32 = run(params32, logits_fn, targets, decays, torch.float32)
    rel = max(float((g32[k].double() - g64[k]).abs().max() / g64[k].abs().max()) for k in g64)
    print(f"{name}: loss_mean {total / count:.9f} (fp32 {total32 / count:.9f}), "
          f"targets {count}, torch fp32 grad max rel err {rel:.2e}")
    print(f"{name}: adamw losses f64 {[round(x, 6) for x in losses64]}")
    print(f"{name}: max |loss32 - loss64| over steps "
          f"{max(abs(a - b) for a, b in zip(losses32, losses64)):.2e}")
    tensors = [("inputs", inputs), ("targets", targets.to(torch.int32))]
    tensors += [(k, v) for k, v in params32.items()]
    tensors += [("logits", ref_logits.float()), ("loss_per_target", per.reshape(-1).float())]
    tensors += [("grad." + k, g64[k].float()) for k in params32]
    # Scalars as exact decimal doubles in the metadata (safetensors metadata values are strings;
    # mantissa's Tensor has no f64, so the file holds only F32 and I32 tensors).
    meta = dict(config)
    meta["loss_sum"] = repr(total)
    meta["loss_count"] = str(count)
    meta["loss_mean"] = repr(total / count)
    meta["adamw_losses"] = json.dumps(losses64)
    meta["torch_fp32_adamw_losses"] = json.dumps(losses32)
    meta["torch_fp32_grad_rel_err"] = repr(rel)
    meta["decay"] = json.dumps([k for k in params32 if decays(k)])
    meta["adamw"] = json.dumps(dict(ADAMW, steps=ADAMW_STEPS))
    meta["generator"] = f"tests/golden/make_golden.py, torch {torch.__version__}"
    save_safetensors(os.path.join(OUT_DIR, name + ".safetensors"), tensors, meta)


def main():
    torch.set_num_threads(1)  # reduction order fixed -> the file is byte-identical on reruns
    os.makedirs(OUT_DIR, exist_ok=True)

    cfg = GPTConfig()
    gen = torch.Generator().manual_seed(1234)
    params = gpt_init(cfg, gen)
    B, T = 2, cfg.n_positions
    inputs = torch.randint(0, cfg.vocab_size, (B, T), generator=gen, dtype=torch.int64)
    targets = torch.roll(inputs, -1, dims=1)  # next byte, as the trainer feeds it
    targets[:, -1] = torch.randint(0, cfg.vocab_size, (B,), generator=gen)
    targets[0, 3] = -1   # ignored targets, in the middle and at the end of a row
    targets[1, 15] = -1
    targets[1, 0] = -1
    write("gpt", params, lambda p: gpt_logits(p, cfg, inputs), inputs.to(torch.int32), targets,
          gpt_decays,
          dict(model="gpt", vocab_size=cfg.vocab_size, n_positions=cfg.n_positions,
               n_embd=cfg.n_embd, n_layer=cfg.n_layer, n_head=cfg.n_head, batch=B, seq_len=T))

    gen = torch.Generator().manual_seed(5678)
    params = mlp_init(gen)
    B = 8
    x = torch.randn((B, MLP_SIZES[0]), generator=gen)
    y = torch.randint(0, MLP_SIZES[-1], (B,), generator=gen, dtype=torch.int64)
    write("mlp", params, lambda p: mlp_logits(p, x.to(p["layers.0.weight"].dtype)), x, y,
          mlp_decays,
          dict(model="mlp", sizes=json.dumps(MLP_SIZES), batch=B))


if __name__ == "__main__":
    sys.exit(main())
