"""A mantissa recipe's casts on the ``nn.Linear`` layers of any PyTorch module.

    import mantissa.torch as mt
    model = mt.wrap(model, "fp8-delayed", set=["cast_margin=1"])

Every ``nn.Linear`` becomes a ``CastLinear`` sharing its parameters. Its
product sees the recipe's casts, as mantissa's own Linear does:

- forward: the input x and the weight W are cast to ``cast_forward``
  (e4m3fn ...) and multiplied in fp32 (products of 1-byte values are exact);
- backward: the output gradient dy is cast to ``cast_backward`` (e5m2 ...);
  dx = dy_q W_q and dW = dy_q^T x_q use the cast operands (the casts are
  straight-through: no gradient of the rounding itself); the bias gradient is
  the sum of the uncast dy.

Scaling (``cast_scaling``): ``unit`` (scale 1), ``current`` (per tensor, the
power of two 2^e with e = margin - k, k the largest shift with amax x 2^k <=
the format's max), ``delayed`` (the same from the max of the last
``amax_history`` amaxes of that layer's operand, the tensor's own amax on the
first call), ``mx`` (E8M0 block scales over ``block`` = 32 values along the
last axis: the contraction axis of x and W, the output features of dy).
Recipes without casts but with a 16-bit ``matmul_format`` (bf16-amp, fp16-amp)
round x, W and dy to it. The arrays are cast by mantissa's kernels (zero-copy
through DLPack). Per-tensor casts saturate; a tensor holding inf/NaN keeps them
(scale 1, no saturation).
"""

from __future__ import annotations

import collections
import math
from typing import Any, Deque, Dict, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

import mantissa as _m

# MX element format -> mantissa's MX preset.
_MX_PRESETS = {"e4m3fn": "mxfp8_e4m3", "e5m2": "mxfp8_e5m2", "e2m3fn": "mxfp6_e2m3", "e3m2fn": "mxfp6_e3m2",
               "e2m1fn": "mxfp4", "int8": "mxint8"}


def scale_exponent(format_max: float, amax: float, margin: int = 0) -> int:
    """Per-tensor scale exponent: e = margin - k, k the largest shift with amax x 2^k <= format_max."""
    if not (amax > 0) or not math.isfinite(amax):
        return 0
    k = math.frexp(format_max)[1] - math.frexp(amax)[1]
    while math.ldexp(amax, k) > format_max:
        k -= 1
    while math.ldexp(amax, k + 1) <= format_max:
        k += 1
    return max(-126, min(126, margin - k))


class Caster:
    """One recipe's casts for one layer: keeps delayed scaling's amax histories per operand."""

    def __init__(self, recipe: Dict[str, Any], block: int = 32, readout: bool = False):
        self.recipe = recipe
        self.readout = readout  # uncast readout (cast_readout false): matmul_format only
        self.scaling = recipe.get("cast_scaling", "unit")
        self.margin = int(recipe.get("cast_margin", 0))
        self.history_len = int(recipe.get("amax_history", 1024))
        self.mx_rounding = recipe.get("mx_scale_rounding", "floor")
        self.block = block
        self.histories: Dict[str, Deque[float]] = {}
        if self.scaling not in ("unit", "current", "delayed", "mx"):
            raise ValueError(f"recipe '{recipe['name']}': cast_scaling '{self.scaling}' is not supported on PyTorch "
                             "modules (unit, current, delayed, mx are)")

    def fmt(self, operand: str) -> str:
        cast = self.recipe.get("cast_backward" if operand == "dy" else "cast_forward", "")
        if cast and not self.readout:
            return cast
        mm = self.recipe.get("matmul_format", "fp32")
        return "" if mm == "fp32" else mm

    def __call__(self, t: torch.Tensor, operand: str) -> torch.Tensor:
        """t rounded as the recipe casts `operand` ("x", "w" or "dy"), fp32."""
        fmt = self.fmt(operand)
        x = t.detach().to(torch.float32).contiguous()
        if not fmt:
            return x
        if self.readout or not (self.recipe.get("cast_forward") or self.recipe.get("cast_backward")):
            return _m.quantize(x, fmt)  # 16-bit matmul format, no scaling
        if self.scaling == "mx":
            preset = _MX_PRESETS.get(fmt)
            if preset is None:
                raise ValueError(f"MX casts to '{fmt}' are not supported (valid: {', '.join(_MX_PRESETS)})")
            codes, scales = _m.mx_quantize(x, preset, self.block, -1, self.mx_rounding)
            return _m.mx_dequantize(codes, scales, preset, self.block)
        amax = float(x.abs().max()) if x.numel() else 0.0
        if not math.isfinite(amax):
            return _m.quantize(x, fmt)
        fmax = _m.format_info(fmt)["max"]
        if self.scaling == "unit":
            e = 0
        elif self.scaling == "current":
            e = scale_exponent(fmax, amax, self.margin)
        else:
            h = self.histories.setdefault(operand, collections.deque(maxlen=self.history_len))
            e = scale_exponent(fmax, max(h) if h else amax, self.margin)
            h.append(amax)
        y = _m.quantize(x * 2.0 ** -e, fmt, saturate=True)
        return y * 2.0 ** e


class _CastLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                caster: Caster) -> torch.Tensor:
        xq = caster(x, "x")  # (..., in)
        wq = caster(weight, "w")  # (out, in)
        ctx.save_for_backward(xq, wq)
        ctx.caster = caster
        ctx.has_bias = bias is not None
        return F.linear(xq, wq, bias)  # (..., out)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        xq, wq = ctx.saved_tensors
        dyq = ctx.caster(dy, "dy")  # (..., out)
        dx = dyq @ wq  # (..., in)
        dw = dyq.reshape(-1, dyq.shape[-1]).t() @ xq.reshape(-1, xq.shape[-1])  # (out, in)
        db = dy.reshape(-1, dy.shape[-1]).sum(0) if ctx.has_bias else None
        return dx, dw, db, None


class CastLinear(nn.Linear):
    """nn.Linear whose product sees a mantissa recipe's casts (shares the wrapped layer's parameters)."""

    def __init__(self, linear: nn.Linear, caster: Caster):
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.caster = caster

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _CastLinearFn.apply(x, self.weight, self.bias, self.caster)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", recipe={self.caster.recipe['name']}"


def wrap(module: nn.Module, recipe: str = "fp8-delayed", set: Sequence[str] = (), block: int = 32) -> nn.Module:
    """Replaces every nn.Linear inside `module` (in place) by a CastLinear under `recipe`.

    `recipe` and `set` are those of ``mantissa train --recipe NAME --set key=value``.
    A recipe with ``cast_readout`` false keeps the last nn.Linear (in definition
    order: the readout) out of the casts, in ``matmul_format`` only, as
    mantissa's models do. Returns `module`.
    """
    r = _m.recipe(recipe, set)
    if isinstance(module, nn.Linear):
        raise ValueError("wrap: pass the module that holds the nn.Linear layers, not a layer itself")
    names = [n for n, m in module.named_modules() if isinstance(m, nn.Linear) and not isinstance(m, CastLinear)]
    for i, name in enumerate(names):  # definition order: the last one is the readout
        parent_name, _, attr = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        readout = i == len(names) - 1 and not r.get("cast_readout", True)
        setattr(parent, attr, CastLinear(getattr(parent, attr), Caster(r, block, readout)))
    return module
