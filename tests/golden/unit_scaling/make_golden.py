#!/usr/bin/env python3
"""Golden values for mantissa's unit-scaling rules from Graphcore's
`unit-scaling` package (PyPI, version 0.3.5).

For fixed small float64 inputs, every op of `unit_scaling.functional` is run
forward and backward (with a fixed output gradient) and its output and input
gradients are written to one JSON file per case next to this script; the
optimizer learning-rate rules and the transformer residual rule are written
to optim.json; a whole u-muP GPT (loss and gradients) to models/umup_gpt.json. tests/unit/test_unit_golden.cpp applies mantissa's rules to
a float64 reference of each op and compares.

Environment (what works on this machine, Debian 12): unit-scaling 0.3.5
requires torch>=2.2, PyPI's torch wheels for Linux pull CUDA (several GB), and
Debian ships torch 1.13. unit-scaling's scaling code only needs torch 1.13
plus two names added in torch 2: `F.scaled_dot_product_attention` (called
un-scaled inside U.scaled_dot_product_attention; shimmed below with the
textbook math, so the *scales* under test remain the package's) and the type
alias `torch.optim.optimizer.ParamsT`. Recreate with:

  apt-get install python3-torch
  python3 -m venv --system-site-packages /tmp/us-venv   # /usr/bin/python3
  /tmp/us-venv/bin/pip install --no-deps unit-scaling==0.3.5 \
      docstring-parser einops tabulate
  /tmp/us-venv/bin/python tests/golden/unit_scaling/make_golden.py
"""
import json
import math
import os
import tempfile
from typing import Any, Dict, Iterable, Union

import torch
import torch.nn.functional as F
import torch.optim.optimizer as torch_optimizer

if not hasattr(F, "scaled_dot_product_attention"):

    def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None):
        s = query.size(-1) ** -0.5 if scale is None else scale
        logits = (query @ key.transpose(-2, -1)) * s
        if is_causal:
            L, S = query.size(-2), key.size(-2)
            keep = torch.ones(L, S, dtype=torch.bool).tril()
            logits = logits.masked_fill(~keep, float("-inf"))
        if attn_mask is not None:
            logits = logits + attn_mask
        return F.dropout(logits.softmax(-1), dropout_p) @ value

    F.scaled_dot_product_attention = _sdpa
if not hasattr(torch_optimizer, "ParamsT"):
    torch_optimizer.ParamsT = Union[Iterable[torch.Tensor], Iterable[Dict[str, Any]]]

import unit_scaling as uu  # noqa: E402
import unit_scaling.functional as U  # noqa: E402
import unit_scaling.optim as uo  # noqa: E402
from unit_scaling.core.functional import transformer_residual_scaling_rule  # noqa: E402

OUT = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(1234)


def randn(*shape):
    return torch.randn(*shape, dtype=torch.float64, requires_grad=True)


def flat(t):
    return {"shape": list(t.shape), "data": [float(v) for v in t.detach().reshape(-1).tolist()]}


def write(name, case):
    case = {"op": name.split("__")[0], "package": "unit-scaling " + uu.__version__, **case}
    path = os.path.join(OUT, name + ".json")
    fd, tmp = tempfile.mkstemp(dir=OUT, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(case, f, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, path)


def run(name, fn, inputs, params=None, int_inputs=None):
    """fn(*inputs) -> output; backward with a seeded grad_output (or 1 for a scalar)."""
    out = fn(*inputs.values())
    grad_out = torch.ones_like(out) if out.dim() == 0 else torch.randn(out.shape, dtype=torch.float64)
    out.backward(grad_out)
    write(name, {
        "params": params or {},
        "inputs": {k: flat(v) for k, v in inputs.items()},
        "int_inputs": {k: {"shape": list(v.shape), "data": v.reshape(-1).tolist()} for k, v in (int_inputs or {}).items()},
        "output": flat(out),
        "grad_output": flat(grad_out),
        "grads": {k: flat(v.grad) for k, v in inputs.items() if v.grad is not None},
    })


def main():
    for c in ["to_output_scale", "gmean", "hmean", "amean", "to_left_grad_scale", "to_right_grad_scale", None]:
        run(f"matmul__{c or 'none'}", lambda a, b: U.matmul(a, b, constraint=c),
            {"left": randn(6, 8), "right": randn(8, 5)}, {"constraint": c or "none"})
    for c in ["to_output_scale", "gmean", "to_grad_input_scale", None]:
        run(f"linear__{c or 'none'}", lambda x, w, b: U.linear(x, w, b, constraint=c),
            {"input": randn(2, 3, 8), "weight": randn(5, 8), "bias": randn(5)}, {"constraint": c or "none"})
    for c in [None, "to_output_scale"]:
        run(f"linear_readout__{c or 'none'}", lambda x, w: U.linear_readout(x, w, None, constraint=c),
            {"input": randn(6, 8), "weight": randn(5, 8)}, {"constraint": c or "none"})
    ids = torch.randint(0, 10, (3, 4))
    run("embedding__", lambda w: U.embedding(ids, w), {"weight": randn(10, 6)}, {}, {"ids": ids})
    for mult in [1.0, 0.5, 3.0]:
        for c in ["to_output_scale", None]:
            run(f"gelu__{mult}_{c or 'none'}", lambda x: U.gelu(x, mult=mult, constraint=c), {"input": randn(5, 7)},
                {"mult": mult, "constraint": c or "none"})
            run(f"silu__{mult}_{c or 'none'}", lambda x: U.silu(x, mult=mult, constraint=c), {"input": randn(5, 7)},
                {"mult": mult, "constraint": c or "none"})
    for mult in [1.0, 2.5]:
        for c in ["to_output_scale", None]:
            run(f"softmax__{mult}_{c or 'none'}", lambda x: U.softmax(x, dim=-1, mult=mult, constraint=c), {"input": randn(4, 7)},
                {"mult": mult, "constraint": c or "none"})
    for causal, mult in [(True, 1.0), (False, 2.0), (True, 4.0)]:
        run(f"scaled_dot_product_attention__{causal}_{mult}",
            lambda q, k, v: U.scaled_dot_product_attention(q, k, v, is_causal=causal, mult=mult),
            {"query": randn(2, 6, 4), "key": randn(2, 6, 4), "value": randn(2, 6, 4)},
            {"causal": causal, "mult": mult})
    torch.manual_seed(99)
    # Dropout's mask is random: the test recovers it from the zeros of the output.
    run("dropout__", lambda x: U.dropout(x, 0.25), {"input": randn(6, 7)}, {"p": 0.25})
    for c in ["to_output_scale", "gmean", None]:
        run(f"add__{c or 'none'}", lambda a, b: U.add(a, b, constraint=c), {"a": randn(4, 5), "b": randn(5)},
            {"constraint": c or "none"})
    for tau in [0.5, 0.01, 2.0]:
        def residual(x, tau=tau):
            branch, skip = U.residual_split(x, tau)
            return U.residual_add(branch * branch, skip, tau)  # branch f(x) = x^2
        run(f"residual__{tau}", residual, {"input": randn(4, 6)}, {"tau": tau})
    run("layer_norm__", lambda x, w, b: U.layer_norm(x, (8,), w, b), {"input": randn(3, 5, 8), "weight": randn(8), "bias": randn(8)},
        {"eps": 1e-5})
    run("rms_norm__", lambda x, w: U.rms_norm(x, (8,), w), {"input": randn(3, 5, 8), "weight": randn(8)}, {"eps": 1e-5})
    targets = torch.randint(0, 9, (6,))
    for mult in [1.0, 2.0]:
        for red in ["mean", "sum"]:
            run(f"cross_entropy__{mult}_{red}", lambda z: U.cross_entropy(z, targets, reduction=red, mult=mult),
                {"input": randn(6, 9)}, {"mult": mult, "reduction": red}, {"targets": targets})
    for red in ["mean", "sum"]:
        run(f"mse__{red}", lambda x, t: U.mse_loss(x, t, reduction=red), {"input": randn(4, 5), "target": randn(4, 5)},
            {"reduction": red})

    # Learning-rate rules: lr = 1 so each group's lr is the scale itself.
    cases = []
    specs = [((64, 32), "weight", 4), ((64, 32), "weight", None), ((32,), "bias", 4), ((32,), "norm", None),
             ((100, 32), "output", None), ((16, 8, 3), "weight", 2), ((256, 48), "weight", 12)]
    for optimizer, func, readout in [("adam", uo.lr_scale_func_adam, None), ("sgd", uo.lr_scale_func_sgd(None), None),
                                     ("sgd", uo.lr_scale_func_sgd("to_output_scale"), "to_output_scale")]:
        for shape, role, depth in specs:
            p = uu.Parameter(torch.zeros(shape), mup_type=role, mup_scaling_depth=depth)
            (group,) = uo.scaled_parameters([p], func, lr=1.0, weight_decay=0.1)
            cases.append({"optimizer": optimizer, "readout_constraint": readout or "none", "shape": list(shape),
                          "role": role, "depth": depth, "lr_scale": float(group["lr"]),
                          "weight_decay": float(group["weight_decay"])})
    taus = []
    for layers, mult, ratio in [(8, 1.0, 1.0), (12, 2.0, 0.5)]:
        rule = transformer_residual_scaling_rule(mult, ratio)
        taus.append({"layers": layers, "residual_mult": mult, "attn_ratio": ratio,
                     "tau": [rule(i, layers) for i in range(layers)]})
    write("optim", {"lr": cases, "transformer_residual": taus,
                    "auto_tau": {"self_attention": 0.01, "other": 0.5}})

    umup_gpt()


def umup_gpt():
    """A whole u-muP GPT (mantissa's `parametrisation=umup`: GPT-2 layout,
    non-parametric LayerNorms, depth-dependent residual taus, u-muP attention
    and readout, unit cross-entropy) composed from the package's functional
    ops: loss and every parameter gradient at one batch. Weights in
    mantissa's layout (Conv1D [in, out]), rounded to float32 so that the
    float32 model holds exactly these values; biases 0 as at initialisation
    (mantissa adds a bias after the linear's forward scale, the package
    before it: the two agree while biases are 0). Written to
    models/umup_gpt.json (tests/nn/test_umup_golden.cpp)."""
    torch.manual_seed(2025)
    V, T, C, H, L, B = 16, 8, 16, 2, 2, 2
    mult, ratio, attn_mult = 2.0, 0.5, 1.0
    rule = transformer_residual_scaling_rule(mult, ratio)

    def leaf(*shape, zero=False):
        t = torch.zeros(*shape, dtype=torch.float64) if zero else torch.randn(*shape).double()  # float32 values
        return t.requires_grad_()

    P = {"transformer.wte.weight": leaf(V, C), "transformer.wpe.weight": leaf(T, C)}
    for i in range(L):
        h = f"transformer.h.{i}."
        for name, shape in [("attn.c_attn", (C, 3 * C)), ("attn.c_proj", (C, C)), ("mlp.c_fc", (C, 4 * C)),
                            ("mlp.c_proj", (4 * C, C))]:
            P[h + name + ".weight"] = leaf(*shape)
            P[h + name + ".bias"] = leaf(shape[1], zero=True)
    P["lm_head.weight"] = leaf(V, C)
    ids = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B, T))

    def lin(x, name):  # mantissa's Conv1D weight [in, out] is the transpose of torch's
        return U.linear(x, P[name + ".weight"].t(), P[name + ".bias"], constraint="to_output_scale")

    def norm(x):
        return U.layer_norm(x, (C,), None, None)

    tok = U.embedding(ids, P["transformer.wte.weight"])
    pos = U.embedding(torch.arange(T).expand(B, T), P["transformer.wpe.weight"])
    x = U.add(tok, pos, constraint="to_output_scale")
    for i in range(L):
        h = f"transformer.h.{i}."
        tau = rule(2 * i, 2 * L)
        branch, skip = U.residual_split(x, tau)
        q, k, v = lin(norm(branch), h + "attn.c_attn").split(C, dim=-1)
        heads = [t.reshape(B, T, H, C // H).transpose(1, 2) for t in (q, k, v)]
        a = U.scaled_dot_product_attention(*heads, is_causal=True, mult=attn_mult)
        y = lin(a.transpose(1, 2).reshape(B, T, C), h + "attn.c_proj")
        x = U.residual_add(y, skip, tau)
        tau = rule(2 * i + 1, 2 * L)
        branch, skip = U.residual_split(x, tau)
        f = U.gelu(lin(norm(branch), h + "mlp.c_fc"), mult=1.0, approximate="tanh")
        x = U.residual_add(lin(f, h + "mlp.c_proj"), skip, tau)
    logits = U.linear_readout(norm(x).reshape(B * T, C), P["lm_head.weight"], None)
    loss = U.cross_entropy(logits, targets.reshape(-1), reduction="mean")
    loss.backward()
    case = {"op": "umup_gpt", "package": "unit-scaling " + uu.__version__,
            "config": {"vocab": V, "context": T, "d_model": C, "heads": H, "layers": L, "batch": B,
                       "residual_mult": mult, "residual_attn_ratio": ratio, "attn_mult": attn_mult},
            "ids": ids.reshape(-1).tolist(), "targets": targets.reshape(-1).tolist(),
            "loss_sum": float(loss) * B * T,
            "params": {k: flat(v) for k, v in P.items()}, "grads": {k: flat(v.grad) for k, v in P.items()}}
    os.makedirs(os.path.join(OUT, "models"), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=OUT, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(case, f, separators=(",", ":"))
        f.write("\n")
    os.replace(tmp, os.path.join(OUT, "models", "umup_gpt.json"))


if __name__ == "__main__":
    main()
