"""A mantissa recipe's casts on the matrix products of any PyTorch module.

    import mantissa.torch as mt
    model = mt.wrap(model, "fp8-delayed", set=["cast_margin=1"])
    print(model.mantissa_report)    # what was cast, by module type, and what was left

Every ``nn.Linear`` becomes a ``CastLinear`` and every transformers ``Conv1D``
(weight [in, out], y = x @ W + b) a ``CastConv1D``, sharing their parameters;
a Conv1D's product is cast as an nn.Linear holding W^T. Each product sees the
recipe's casts, as mantissa's own Linear does:

- forward: the input x and the weight W are cast to ``cast_forward``
  (e4m3fn ...) and multiplied in fp32 (products of 1-byte values are exact);
- backward: the output gradient dy is cast to ``cast_backward`` (e5m2 ...);
  dx = dy_q W_q and dW = dy_q^T x_q use the cast operands (the casts are
  straight-through: no gradient of the rounding itself); the bias gradient is
  the sum of the uncast dy.

The casts are the engine's own: every layer's operands go through the quantisers
a training run builds from the same recipe (``mantissa.Fp8Quantiser``,
``mantissa.Fp4Quantiser``, read from the typed ``mantissa.Recipe``), so scale
rules, amax histories, blocks and rounding are mantissa's by construction.
Scaling (``cast_scaling``): ``unit`` (scale 1), ``current`` (per-tensor power
of two from the tensor's amax, ``cast_margin``), ``delayed`` (the same from the
max of the last ``amax_history`` amaxes of that layer's operand, the tensor's
own amax on the first call; each cast with gradient is one step of the
history), ``mx`` (E8M0 block scales over ``block`` = 32 values along the last
axis: the contraction axis of x and W, the output features of dy), ``blockwise``
(1 x 128 tiles along the last axis, 128 x 128 weight blocks). Passes without
gradient (``torch.no_grad``) record nothing, as the engine's evaluation passes.
FP4 recipes (``nvfp4``, ``nvfp4-naive``, ``mxfp4``, ``mxfp4-fwd``, ``mxfp4-naive``) cast as
``Fp4Caster`` says: each of the three products with its own blocks, the Hadamard
transform on the Wgrad inputs (and, with ``rht_dgrad``, the dgrad ones).
Recipes without casts but with a 16-bit ``matmul_format`` (bf16-amp, fp16-amp)
round x, W and dy to it. Per-tensor casts saturate; a tensor holding inf/NaN
keeps them (scale 1, no saturation).

Products the wrapper does not cast are named in ``WrapReport.uncast`` with an
``UncastWarning``: nn.MultiheadAttention, convolutions, nn.Bilinear and recurrent
layers by type, and, with ``inputs`` (or ``audit``), every product a forward pass
calls outside the cast layers (attention's batched products, F.linear or matmul
on a module's own matrix or on a tied embedding).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import sys
import warnings
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import mantissa as _m
from mantissa import _core

# A torch linked to the same OpenMP runtime (Debian's) sets the calling
# thread's OpenMP thread count when it is first imported, which would
# silently change mantissa's: keep the count mantissa had.
_threads = _m.num_threads()
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

_m.set_num_threads(_threads)

class Caster:
    """One recipe's casts for one layer: the engine's FP8 quantiser per operand (``mantissa.Fp8Quantiser``).

    Each operand ("x", "w", "dy") that the recipe casts has its own quantiser, which keeps that operand's
    state (delayed scaling's amax history); each cast with gradient is one step of that history. Operands
    the recipe does not cast, and every operand of a readout kept uncast, are rounded to ``matmul_format``.
    """

    _ROLES = {"x": _core.OperandRole.activation, "w": _core.OperandRole.weight, "dy": _core.OperandRole.grad_output}

    def __init__(self, recipe: _core.Recipe, block: int = 32, readout: bool = False):
        self.recipe, self.block = recipe, block
        self.readout = readout  # uncast readout (cast_readout false): matmul_format only
        if recipe.cast_scaling == _core.CastScaling.propagate:
            raise ValueError(f"recipe '{recipe.name}': cast_scaling 'propagate' is not supported on PyTorch modules "
                             "(its scales start from mantissa's models' parameters)")
        self.quantisers: Dict[str, _core.Fp8Quantiser] = {}
        if not readout:
            casts = {"x": recipe.cast_forward, "w": recipe.cast_forward, "dy": recipe.cast_backward}
            self.quantisers = {op: _core.Fp8Quantiser(recipe, self._ROLES[op], block)
                               for op, fmt in casts.items() if fmt is not None}
        self.matmul_format = None if recipe.matmul_format == "fp32" else recipe.matmul_format

    def __call__(self, t: torch.Tensor, operand: str, record: bool = True) -> torch.Tensor:
        """t rounded as the recipe casts `operand` ("x", "w" or "dy"), fp32; record false: a pass without gradient."""
        x = t.detach().to(torch.float32).contiguous()
        q = self.quantisers.get(operand)
        if q is None:
            return _m.quantize(x, self.matmul_format) if self.matmul_format else x
        y = torch.empty_like(x)
        q.cast(x, out=y, record=record)
        if record:
            q.end_step()
        return y

    @property
    def histories(self) -> Dict[str, List[float]]:
        """Delayed scaling's amax history of each operand that has one, oldest first."""
        return {op: q.history for op, q in self.quantisers.items() if q.history}

    def __getstate__(self) -> Dict[str, Any]:
        return {"recipe": self.recipe, "block": self.block, "readout": self.readout, "histories": self.histories}

    def __setstate__(self, state: Dict[str, Any]) -> None:
        """A copy (copy.deepcopy, pickle) with the same histories: each amax cast again as a 1 x 1 tensor."""
        self.__init__(state["recipe"], state["block"], state["readout"])
        for op, amaxes in state["histories"].items():
            for amax in amaxes:
                self.quantisers[op].cast(torch.full((1, 1), amax, dtype=torch.float32))
                self.quantisers[op].end_step()


def _fp32(a: Any) -> torch.Tensor:
    """A float32 numpy result of the bindings as a tensor (zero-copy through DLPack)."""
    return torch.utils.dlpack.from_dlpack(a.__dlpack__())


class Fp4Caster:
    """An FP4 recipe's casts for one layer (``fp4_format`` nvfp4 or mxfp4): the engine's FP4 quantiser's.

    The layer's casts come from ``mantissa.Fp4Quantiser`` (one per wrapped module, as the engine has one per
    model: its stochastic casts draw seeds from one stream, a hash of ``rht_seed`` and the cast's index in it).
    Blocks of b values (NVFP4: 16, E4M3 scales and a tensor scale; MXFP4: 32, E8M0 scales). Per product of
    y = x W^T (x [M, in], W [out, in]):
    forward x W^T: x in 1 x b blocks along `in`; W in b x b blocks (``fp4_weight_2d``) or 1 x b along `in`;
    dgrad dy W: dy 1 x b along `out`; W the forward cast when 2-D (else 1 x b along `out`), with
    ``rht_dgrad`` both rotated along `out` first; wgrad dy^T x: dy and x in blocks of b rows along M,
    both rotated first by the 16-row Hadamard transform (``rht``, signs from ``rht_seed``). Rounding:
    nearest-even, stochastic for dy (``fp4_sr`` gradients) and for x and W in backward too (backward);
    MXFP4's stochastic casts scale their blocks by 3/4 first (tensor scale 4/3). The backward operands of x
    and W are cast in the forward pass, as the engine casts them (W's once per change of its values).
    ``fp4_forward`` false: the forward product rounds x and W to bf16 instead; ``fp4_backward`` false: the
    backward products multiply dy in ``matmul_format`` by the forward operands. The readout is kept in bf16
    when ``bf16_layers`` names the head. ``fp4_until`` is not applied (a module has no step count).
    """

    def __init__(self, recipe: _core.Recipe, quantiser: _core.Fp4Quantiser, readout: bool = False):
        self.recipe, self.quantiser, self.last = recipe, quantiser, readout
        self.layer = quantiser.layer(readout)
        self.readout = not self.layer.active  # a bf16 layer ("head" in bf16_layers)
        self.backward = recipe.fp4_backward
        self.matmul_format = None if recipe.matmul_format == "fp32" else recipe.matmul_format

    def __getstate__(self) -> Tuple[Any, ...]:
        return self.recipe, self.quantiser, self.last

    def __setstate__(self, state: Tuple[Any, ...]) -> None:
        """A copy: the copied module's layers share one new quantiser (a new draw stream), weights cast afresh."""
        self.__init__(*state)

    def inputs(self, x: torch.Tensor, record: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        """x [M, in]: (the forward product's operand, the weight gradient's)."""
        return tuple(_fp32(a) for a in self.layer.cast_input(x.detach().to(torch.float32).contiguous(), record))

    def weight(self, w: torch.Tensor, record: bool) -> Tuple[torch.Tensor, torch.Tensor]:
        """W [out, in]: (the forward product's operand, the input gradient's)."""
        return tuple(_fp32(a) for a in self.layer.cast_weight(w.detach().to(torch.float32).contiguous(), record))

    def gradient(self, dy: torch.Tensor, wgrad: bool) -> torch.Tensor:
        """dy [M, out] for the input gradient (blocks along out) or the weight gradient (blocks along M)."""
        if not self.backward:
            return _m.quantize(dy, self.matmul_format) if self.matmul_format else dy
        return _fp32(self.layer.cast_gradient(dy, wgrad))


class _Fp4LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                caster: Fp4Caster, record: bool) -> torch.Tensor:
        x2 = x.detach().reshape(-1, x.shape[-1])  # (M, in)
        xq, xw = caster.inputs(x2, record)
        wq, wd = caster.weight(weight, record)  # (out, in)
        ctx.save_for_backward(xw, wd)
        ctx.caster, ctx.has_bias, ctx.shape = caster, bias is not None, x.shape
        y = F.linear(xq, wq, bias)  # (M, out)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Any:
        xw, wd = ctx.saved_tensors
        c: Fp4Caster = ctx.caster
        dy2 = dy.reshape(-1, dy.shape[-1]).to(torch.float32).contiguous()  # (M, out)
        dx = c.gradient(dy2, wgrad=False) @ wd  # (M, in)
        dw = c.gradient(dy2, wgrad=True).t() @ xw  # (out, in)
        db = dy2.sum(0) if ctx.has_bias else None
        return dx.reshape(ctx.shape).to(dy.dtype), dw, db, None, None


class _CastLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                caster: Caster, record: bool) -> torch.Tensor:
        xq = caster(x, "x", record)  # (..., in)
        wq = caster(weight, "w", record)  # (out, in)
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
        return dx, dw, db, None, None


def _cast_product(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], caster: Any) -> torch.Tensor:
    """x W^T + b under `caster`, W [out, in] (the contraction axis last).

    As the engine's passes, one without gradient (evaluation, ``torch.no_grad``) records nothing in the
    casts' state: no amax enters a delayed-scaling history, no FP4 stochastic draw is taken.
    """
    fn = _Fp4LinearFn if isinstance(caster, Fp4Caster) else _CastLinearFn
    return fn.apply(x, weight, bias, caster, torch.is_grad_enabled())


class CastLinear(nn.Linear):
    """nn.Linear whose product sees a mantissa recipe's casts (shares the wrapped layer's parameters)."""

    def __init__(self, linear: nn.Linear, caster: Any):
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.caster = caster

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _cast_product(x, self.weight, self.bias, self.caster)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", recipe={self.caster.recipe.name}"


def is_conv1d(m: nn.Module) -> bool:
    """Whether `m` is transformers' ``Conv1D`` (y = x @ W + b, W [in, out], ``nf`` outputs).

    By isinstance when transformers is already imported; otherwise by its class name (or a base's),
    its ``nf`` attribute and a 2-D weight with ``nf`` columns, so that transformers is never imported.
    """
    tpu = sys.modules.get("transformers.pytorch_utils")
    cls = getattr(tpu, "Conv1D", None) if tpu is not None else None
    if not (isinstance(cls, type) and isinstance(m, cls)) and not any(c.__name__ == "Conv1D" for c in type(m).__mro__):
        return False
    w, nf = getattr(m, "weight", None), getattr(m, "nf", None)
    return isinstance(w, torch.Tensor) and w.dim() == 2 and isinstance(nf, int) and w.shape[1] == nf


class CastConv1D(nn.Module):
    """transformers' Conv1D (weight [in, out], y = x @ W + b) under a recipe's casts, sharing its parameters.

    The product is nn.Linear's with W^T [out, in]: every cast blocks and scales along the same axes as
    for an nn.Linear holding W^T (x and W along the contraction axis `in`, dy along `out`), so both give
    the same bits. The weight gradient comes back [in, out] through the transpose.
    """

    def __init__(self, conv: nn.Module, caster: Any):
        super().__init__()
        self.nf, self.nx = conv.nf, int(conv.weight.shape[0])
        self.weight = conv.weight
        self.bias = getattr(conv, "bias", None)
        self.caster = caster

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _cast_product(x, self.weight.t(), self.bias, self.caster)

    def extra_repr(self) -> str:
        return f"nf={self.nf}, nx={self.nx}, recipe={self.caster.recipe.name}"


class Uncast(NamedTuple):
    """A matrix product that stays in the module's own precision."""

    name: str  # module path ("" for the wrapped module itself)
    kind: str  # the module's type
    what: str  # the product(s) and why they are not cast


class UncastWarning(UserWarning):
    """wrap() or audit() found matrix products that the recipe's casts do not reach."""


@dataclasses.dataclass
class WrapReport:
    """What ``wrap`` cast and what it left; ``wrap`` sets it as the module's ``mantissa_report``."""

    recipe: str
    wrapped: Dict[str, int]  # cast layers by the wrapped module's type, e.g. {"Conv1D": 8, "Linear": 1}
    layers: List[str]  # their names, in definition order
    readout: Optional[str]  # the layer kept to matmul_format / bf16 (cast_readout false, bf16_layers=head)
    tied: Dict[str, str]  # an nn.Embedding sharing its weight with a cast layer -> that layer
    uncast: List[Uncast]  # products the wrapper recognises and cannot cast
    unseen: List[Uncast]  # matrices it cannot see used: a product with them in forward() is not cast

    @property
    def uncast_counts(self) -> Dict[str, int]:
        return dict(collections.Counter(u.kind for u in self.uncast))

    def __str__(self) -> str:
        n = sum(self.wrapped.values())
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.wrapped.items()))
        out = f"mantissa.torch.wrap({self.recipe}): {n} products cast ({counts or 'none'})"
        if self.readout:
            out += f"; readout '{self.readout}' in matmul_format only"
        if self.tied:
            out += "; tied: " + ", ".join(f"'{e}' is the weight of cast '{l}'" for e, l in self.tied.items())
        left = [f"'{u.name}' ({u.kind}: {u.what})" for u in self.uncast]
        left += [f"maybe '{u.name}' ({u.kind}: {u.what})" for u in self.unseen]
        return out + "; uncast: " + ("; ".join(left) if left else "none found (products inside forward(), "
                                     "e.g. attention's, are not seen: audit() lists them)")


log = logging.getLogger("mantissa.torch")

# Layers whose products the wrapper recognises but does not cast, and why.
_UNCAST_TYPES = (
    (nn.MultiheadAttention, "in-projection, out_proj and attention products run in "
     "F.multi_head_attention_forward, which reads the weights directly"),
    (nn.modules.conv._ConvNd, "convolution"),
    (nn.Bilinear, "bilinear product"),
    (nn.RNNBase, "recurrent products"),
    (nn.RNNCellBase, "recurrent products"),
)
_SEEN = (nn.Linear, nn.Embedding, nn.EmbeddingBag, CastConv1D) + tuple(t for t, _ in _UNCAST_TYPES)


def _survey(module: nn.Module) -> Tuple[List[str], List[Uncast], List[Uncast]]:
    """The layers to cast (nn.Linear, Conv1D: definition order), the uncast products, the unseen matrices."""
    targets: List[str] = []
    uncast: List[Uncast] = []
    unseen: List[Uncast] = []
    inside: List[str] = []  # layers whose children are theirs (an MHA's out_proj is never called)
    for name, m in module.named_modules():
        if any(p == "" or name.startswith(p + ".") for p in inside):
            continue
        if isinstance(m, (CastLinear, CastConv1D)):
            continue
        why = next((w for t, w in _UNCAST_TYPES if isinstance(m, t)), None)
        if why is not None:
            uncast.append(Uncast(name, type(m).__name__, why))
            inside.append(name)
        elif isinstance(m, nn.Linear) or is_conv1d(m):
            targets.append(name)
        elif not isinstance(m, _SEEN):
            mats = [f"{k} {list(p.shape)}" for k, p in m.named_parameters(recurse=False) if p.dim() >= 2]
            if mats:
                unseen.append(Uncast(name, type(m).__name__, "holds " + ", ".join(mats) + ": a product with it "
                                     "(F.linear, matmul) in forward() is not cast"))
    return targets, uncast, unseen


def wrap(module: nn.Module, recipe: str = "fp8-delayed", set: Sequence[str] = (), block: int = 32,
         strict: bool = False, inputs: Any = None) -> nn.Module:
    """Casts every matrix product of `module` it recognises (in place) under `recipe`; returns `module`.

    Each nn.Linear becomes a CastLinear and each transformers ``Conv1D`` a CastConv1D, sharing their
    parameters. `recipe` and `set` are those of ``mantissa train --recipe NAME --set key=value``.
    A recipe with ``cast_readout`` false (or FP4's ``bf16_layers=head``) keeps the last of these layers
    (in definition order: the readout) in ``matmul_format`` (bf16) only, as mantissa's models do.

    ``module.mantissa_report`` (a WrapReport) counts the cast layers by type and names what is left:
    nn.MultiheadAttention, convolutions, nn.Bilinear and recurrent layers (uncast: a warning, or with
    `strict` a ValueError before anything is changed), and modules holding matrices used outside an
    nn.Linear (unseen: a warning). With `inputs` (a tuple of positional arguments or a dict of keyword
    arguments) one forward pass through `audit` adds the products called inside forward() that are
    not cast (attention's batched products, F.linear on a tied embedding ...) to ``uncast``.
    The report is logged as one line on the ``mantissa.torch`` logger (INFO).
    """
    r = _core.Recipe(recipe, list(set))
    if isinstance(module, nn.Linear) or is_conv1d(module):
        raise ValueError("wrap: pass the module that holds the nn.Linear layers, not a layer itself")
    fp4 = _core.Fp4Quantiser(r) if r.fp4_format is not None else None
    if fp4 is not None and r.bf16_blocks:
        raise ValueError(f"recipe '{recipe}': bf16_layers names blocks {r.bf16_blocks}, which a PyTorch module "
                         "does not have; pass set=['bf16_layers=head'] (the last nn.Linear) or 'none'")
    names, uncast, unseen = _survey(module)
    if strict and uncast:
        raise ValueError("wrap: these products cannot be cast (strict): "
                         + "; ".join(f"'{u.name}' ({u.kind}: {u.what})" for u in uncast))
    counts: Dict[str, int] = collections.Counter()
    readout = None
    for i, name in enumerate(names):  # definition order: the last one is the readout
        parent_name, _, attr = name.rpartition(".")
        parent = module.get_submodule(parent_name) if parent_name else module
        layer = getattr(parent, attr)
        last = i == len(names) - 1
        if fp4 is not None:
            caster: Any = Fp4Caster(r, fp4, readout=last)
        else:
            caster = Caster(r, block, last and not r.cast_readout)
        if caster.readout:
            readout = name
        counts[type(layer).__name__] += 1
        setattr(parent, attr, CastConv1D(layer, caster) if is_conv1d(layer) else CastLinear(layer, caster))
    cast_weights = {id(m.weight): n for n, m in module.named_modules() if isinstance(m, (CastLinear, CastConv1D))}
    tied = {n: cast_weights[id(m.weight)] for n, m in module.named_modules()
            if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and id(m.weight) in cast_weights}
    report = WrapReport(recipe, dict(counts), names, readout, tied, uncast, unseen)
    if inputs is not None:  # what forward() calls replaces the guesses from the parameters
        report.unseen = []
        known = {u.name for u in uncast}
        report.uncast.extend(u for u in audit(module, inputs) if u.name not in known)
    module.mantissa_report = report
    log.info("%s", report)
    if report.uncast or report.unseen:
        warnings.warn(UncastWarning(str(report)), stacklevel=2)
    return module


# Tensor functions that are matrix products (by name: a function, its Tensor method and its operator).
_PRODUCT_FUNCS = frozenset({
    "linear", "bilinear", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "addmm_", "baddbmm",
    "baddbmm_", "addbmm", "addbmm_", "einsum", "tensordot", "chain_matmul", "multi_dot", "conv1d", "conv2d",
    "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "multi_head_attention_forward",
    "scaled_dot_product_attention",
})


class _ProductLog(TorchFunctionMode):
    """Records each matrix product called outside a cast layer, by the innermost module calling it."""

    def __init__(self, stack: List[Tuple[str, nn.Module]], params: Dict[int, str]):
        super().__init__()
        self.stack, self.params = stack, params
        self.seen: Dict[Tuple[str, str, str], int] = collections.OrderedDict()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        op = getattr(func, "__name__", "")
        if op in _PRODUCT_FUNCS and not any(isinstance(m, (CastLinear, CastConv1D)) for _, m in self.stack):
            name, m = self.stack[-1] if self.stack else ("", None)
            flat = [a for a in list(args) + list((kwargs or {}).values())
                    for a in (a if isinstance(a, (list, tuple)) else [a])]
            ops = []
            for a in flat:
                if isinstance(a, torch.Tensor):
                    p = self.params.get(id(a)) or (self.params.get(id(a._base)) if a._base is not None else None)
                    ops.append(f"{list(a.shape)}" + (f" '{p}'" if p else ""))
            key = (name, type(m).__name__ if m is not None else "", f"{op}({', '.join(ops)})")
            self.seen[key] = self.seen.get(key, 0) + 1
        return func(*args, **(kwargs or {}))


def audit(module: nn.Module, inputs: Any) -> List[Uncast]:
    """The matrix products one forward pass of `module` on `inputs` calls outside its cast layers.

    `inputs` is a tuple of positional arguments or a dict of keyword arguments. Runs in eval mode
    without gradients (no dropout, no batch-norm statistics), and leaves the training flags and the
    RNG as they were; a pass without gradients records nothing in the casts' state (delayed-scaling
    histories, FP4 draws). Each entry names the innermost module that calls the product, the
    operation with its operand shapes (and the parameter it multiplies, if one: a tied embedding's
    weight), and how many times it was called.
    """
    stack: List[Tuple[str, nn.Module]] = []
    names: Dict[int, List[str]] = collections.defaultdict(list)  # a tied weight has several names
    for mname, m in module.named_modules():
        for k, p in m.named_parameters(recurse=False):
            names[id(p)].append(f"{mname}.{k}" if mname else k)
    params = {i: " = ".join(n) for i, n in names.items()}
    for m in module.modules():
        if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and id(m.weight) in params:
            params[id(m.weight)] += " (an embedding: a tied head)"
    hooks = []
    for name, m in module.named_modules():
        hooks.append(m.register_forward_pre_hook(lambda mod, a, name=name: stack.append((name, mod))))
        hooks.append(m.register_forward_hook(lambda mod, a, out: (stack.pop(), None)[1]))  # None: keeps `out`
    rng = torch.random.get_rng_state()
    training = [(m, m.training) for m in module.modules()]
    mode = _ProductLog(stack, params)
    try:
        module.eval()
        with torch.no_grad(), mode:
            if isinstance(inputs, dict):
                module(**inputs)
            else:
                module(*(inputs if isinstance(inputs, tuple) else (inputs,)))
    finally:
        for h in hooks:
            h.remove()
        torch.random.set_rng_state(rng)
        for m, t in training:
            m.training = t
    found: Dict[Tuple[str, str], List[str]] = collections.OrderedDict()  # one entry per module
    for (name, kind, what), n in mode.seen.items():
        found.setdefault((name, kind), []).append(f"{what} x{n}" if n > 1 else what)
    return [Uncast(name, kind, "; ".join(whats)) for (name, kind), whats in found.items()]
