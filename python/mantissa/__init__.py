"""mantissa from Python: number formats on arrays, recipes, and the training engine.

Arrays are numpy arrays or anything with DLPack on the CPU (PyTorch tensors);
they are read in place, and results come back as the caller's kind of array
(numpy for numpy, torch for torch). The kernels release the GIL (from 16 Ki
values up) and run on the library's threads (``set_num_threads``).

    import numpy as np, mantissa
    x = np.random.randn(1 << 20).astype(np.float32)
    y = mantissa.quantize(x, "e4m3fn")                 # fp32 values on the e4m3fn grid
    codes = mantissa.encode(x, "e4m3fn")                # uint8 codes
    codes8 = mantissa.as_ml_dtypes(codes, "e4m3fn")     # ml_dtypes.float8_e4m3fn view
    q, s = mantissa.mx_quantize(x.reshape(-1, 64), "mxfp8_e4m3")
    c, s, t = mantissa.nvfp4_quantize(x.reshape(-1, 64))     # E2M1 codes, E4M3 scales, tensor scale
"""

from __future__ import annotations

import json as _json
import operator as _operator
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as _np

from . import _core, data
from ._engine import experiment, load_weights, train

__all__ = [
    "quantize", "encode", "decode", "mx_quantize", "mx_dequantize", "nvfp4_quantize", "nvfp4_dequantize",
    "mxfp4_quantize", "mxfp4_dequantize", "NVFP4_BLOCKS", "MXFP4_BLOCKS", "rht", "formats", "format_info",
    "as_ml_dtypes", "from_ml_dtypes", "recipes", "recipe", "num_threads", "set_num_threads",
    "train", "experiment", "load_weights", "ROUNDING_MODES", "MX_FORMATS", "data",
    "Recipe", "Fp8Quantiser", "Fp8Cast", "Fp4Quantiser", "Fp4Layer", "OperandRole", "CastScaling",
    "ScaleRounding", "Fp4Format", "RhtMode", "Fp4Rounding",
]

ROUNDING_MODES = ("nearest-even", "nearest-away", "toward-zero", "up", "down", "stochastic")
MX_FORMATS = ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "mxint8")

num_threads = _core.num_threads
set_num_threads = _core.set_num_threads

# The typed recipe and the engine's operand quantisers (python/src/recipe.cpp, quant.cpp): what
# mantissa.torch casts with.
Recipe = _core.Recipe
Fp8Quantiser, Fp8Cast = _core.Fp8Quantiser, _core.Fp8Cast
Fp4Quantiser, Fp4Layer = _core.Fp4Quantiser, _core.Fp4Layer
OperandRole, CastScaling, ScaleRounding = _core.OperandRole, _core.CastScaling, _core.ScaleRounding
Fp4Format, RhtMode, Fp4Rounding = _core.Fp4Format, _core.RhtMode, _core.Fp4Rounding

# ml_dtypes' name for each mantissa format that both have.
_ML_DTYPES = {
    "bf16": "bfloat16", "fp16": "float16", "fp32": "float32", "e5m2": "float8_e5m2",
    "e5m2fnuz": "float8_e5m2fnuz", "e4m3fn": "float8_e4m3fn", "e4m3fnuz": "float8_e4m3fnuz",
    "e4m3": "float8_e4m3", "e4m3b11fnuz": "float8_e4m3b11fnuz", "e3m4": "float8_e3m4",
    "e8m0": "float8_e8m0fnu", "e2m3fn": "float6_e2m3fn", "e3m2fn": "float6_e3m2fn", "e2m1fn": "float4_e2m1fn",
}


def _is_numpy(x: Any) -> bool:
    return isinstance(x, _np.ndarray)


def _like(x: Any, result: Any) -> Any:
    """A numpy result as the caller's kind of array (zero-copy through DLPack)."""
    if _is_numpy(x) or not hasattr(x, "__dlpack__"):
        return result
    import torch  # only DLPack producers other than numpy reach here

    if isinstance(x, torch.Tensor):
        return torch.utils.dlpack.from_dlpack(result.__dlpack__())
    return result


def _codes_in(codes: Any) -> Any:
    """ml_dtypes arrays (no DLPack export) are read as their integer codes."""
    if _is_numpy(codes) and codes.dtype.type.__module__.startswith("ml_dtypes"):
        return codes.view({1: _np.uint8, 2: _np.uint16, 4: _np.uint32}[codes.dtype.itemsize])
    return codes


def _check_out(out: Any, name: str = "out") -> None:
    # numpy arrays (memmaps too) by their flag; other kinds carry none, and the
    # bindings refuse them when their memory is mapped read-only.
    if _is_numpy(out) and not out.flags.writeable:
        raise ValueError(f"{name}: the array is read-only")
    _check_order(out, name)


def _int_arg(value: Any, name: str, lo: int, hi: int) -> int:
    """value as an int in lo..hi: TypeError for a non-integer, else ValueError naming the argument."""
    try:
        v = _operator.index(value)
    except TypeError:
        raise TypeError(f"{name}: expected an int, got {type(value).__name__}") from None
    if not lo <= v <= hi:
        raise ValueError(f"{name}: must be in {lo}..{hi}, got {v}")
    return v


_MAX_COUNT = 2**63 - 1
_MAX_BLOCK = 2**31 - 1


def _check_order(a: Any, name: str) -> None:
    if _is_numpy(a) and not a.dtype.isnative:
        raise TypeError(f"{name}: expected values in the machine's byte order, got dtype {a.dtype.str} "
                        "(a.astype(a.dtype.newbyteorder('=')))")


# quantize, encode and decode (fast.cpp) take numpy arrays straight to the
# kernels; every other call comes here with the same arguments, positionally.
quantize = _core.quantize
encode = _core.encode
decode = _core.decode


def _quantize_any(x: Any, format: str, round: str, saturate: bool, flush_subnormals: bool, seed: int,
                  random_bits: int, out: Any) -> Any:
    _check_order(x, "x")
    if out is not None:
        _check_out(out)
        _core.quantize_dlpack(x, format, round, saturate, flush_subnormals, seed, random_bits, out)
        return out
    return _like(x, _core.quantize_dlpack(x, format, round, saturate, flush_subnormals, seed, random_bits))


def _encode_any(x: Any, format: str, round: str, saturate: bool, flush_subnormals: bool, seed: int,
                random_bits: int, packed: bool, out: Any) -> Any:
    _check_order(x, "x")
    if out is not None:  # may be an ml_dtypes array of the format: its codes are written
        _check_out(out)
        _core.encode_dlpack(x, format, round, saturate, flush_subnormals, seed, random_bits, packed, _codes_in(out))
        return out
    return _like(x, _core.encode_dlpack(x, format, round, saturate, flush_subnormals, seed, random_bits, packed))


def _decode_any(codes: Any, format: str, packed: bool, count: Optional[int], out: Any) -> Any:
    codes = _codes_in(codes)
    _check_order(codes, "codes")
    if count is not None:
        count = _int_arg(count, "count", 0, _MAX_COUNT)
    if out is not None:
        _check_out(out)
        _core.decode_dlpack(codes, format, packed, count, out)
        return out
    return _like(codes, _core.decode_dlpack(codes, format, packed, count))


def mx_quantize(x: Any, format: str = "mxfp8_e4m3", block: int = 32, axis: int = -1,
                scale_rounding: str = "floor", out: Optional[Tuple[Any, Any]] = None) -> Tuple[Any, Any]:
    """OCP MX: blocks of `block` values along `axis` share an E8M0 scale.

    Returns (element codes, uint8 E8M0 scale codes); codes have x's shape, scales
    x's shape with `axis` of length ceil(K / block). The last block of a row may
    be shorter. Element codes are one per byte (FP4/FP6 in the low bits; MXINT8
    two's complement with 6 fraction bits). scale_rounding "ceil" never clips.
    out: (codes, scales) uint8 numpy arrays of those shapes to write into (blocks
    along the last axis only), writable and apart from x and each other; they
    are returned. block: 1..2^31-1.
    """
    block = _int_arg(block, "block", 1, _MAX_BLOCK)
    if out is not None:
        if not (isinstance(out, tuple) and len(out) == 2 and all(_is_numpy(a) for a in out)):
            raise TypeError("out: expected a tuple (codes, scales) of numpy arrays")
        if axis not in (-1, _ndim(x) - 1):
            raise ValueError("out: only for blocks along the last axis (axis=-1)")
        _check_out(out[0], "out[0] (codes)")
        _check_out(out[1], "out[1] (scales)")
        _core.mx_quantize(x, format, block, scale_rounding, out[0], out[1])
        return out
    moved = _moveaxis_in(x, axis)
    codes, scales = _core.mx_quantize(moved, format, block, scale_rounding)
    return _like(x, _moveaxis_out(codes, axis)), _like(x, _moveaxis_out(scales, axis))


def mx_dequantize(codes: Any, scales: Any, format: str = "mxfp8_e4m3", block: int = 32, axis: int = -1) -> Any:
    """MX element codes and E8M0 scales (as mx_quantize returns them) -> fp32 values."""
    block = _int_arg(block, "block", 1, _MAX_BLOCK)
    result = _core.mx_dequantize(_moveaxis_in(codes, axis), _moveaxis_in(scales, axis), format, block)
    return _like(codes, _moveaxis_out(result, axis))


NVFP4_BLOCKS = ("1x16", "16x16")
MXFP4_BLOCKS = ("1x32", "32x32")


def _fp4_tiles(scale: str, block: str) -> Tuple[int, int]:
    blocks = NVFP4_BLOCKS if scale == "nvfp4" else MXFP4_BLOCKS
    if block not in blocks:
        raise ValueError(f"block: expected one of {', '.join(blocks)}, got '{block}'")
    b = 16 if scale == "nvfp4" else 32
    return (1, b) if block == blocks[0] else (b, b)


def _as_numpy(x: Any) -> _np.ndarray:
    return x if _is_numpy(x) else _np.from_dlpack(x)


def _fp4_quantize(scale: str, x: Any, block: str, axis: int, round: str, seed: int, packed: bool,
                  headroom: bool) -> Tuple[Any, Any, float]:
    tr, tc = _fp4_tiles(scale, block)
    if tr > 1:
        if _ndim(x) != 2 or axis not in (-1, 1):
            raise ValueError(f"block {block}: x must be a 2-D array and axis -1")
        codes, scales, t = _core.fp4_quantize(x, scale, tr, tc, round, seed, packed, headroom)
        return _like(x, codes), _like(x, scales), t
    moved = _as_numpy(_moveaxis_in(x, axis))
    if moved.ndim == 0:
        raise ValueError("x needs at least one dimension")
    k = moved.shape[-1]
    flat = moved.reshape(_rows(moved), k)
    codes, scales, t = _core.fp4_quantize(flat, scale, tr, tc, round, seed, packed, headroom)
    lead = moved.shape[:-1]
    codes = codes.reshape(lead + (codes.shape[-1],))
    scales = scales.reshape(lead + (scales.shape[-1],))
    return _like(x, _moveaxis_out(codes, axis)), _like(x, _moveaxis_out(scales, axis)), t


def _fp4_dequantize(scale: str, codes: Any, scales: Any, tensor_scale: float, block: str, axis: int, packed: bool,
                    count: Optional[int]) -> Any:
    tr, tc = _fp4_tiles(scale, block)
    if count is not None:
        count = _int_arg(count, "count", 0, _MAX_COUNT)
    if tr > 1:
        if _ndim(codes) != 2 or axis not in (-1, 1):
            raise ValueError(f"block {block}: codes must be a 2-D array and axis -1")
        k = count if count is not None else (2 * codes.shape[1] if packed else codes.shape[1])
        return _like(codes, _core.fp4_dequantize(codes, scales, float(tensor_scale), scale, tr, tc, packed, k))
    c = _as_numpy(_moveaxis_in(codes, axis))
    s = _as_numpy(_moveaxis_in(scales, axis))
    if c.ndim == 0:
        raise ValueError("codes need at least one dimension")
    if s.shape[:-1] != c.shape[:-1]:
        raise ValueError(f"scales: shape must be the codes' with the block axis of length ceil(K / {tc})")
    width = c.shape[-1]
    if count is not None and not packed:
        raise ValueError("count: only for packed codes")
    k = count if count is not None else (2 * width if packed else width)
    values = _core.fp4_dequantize(c.reshape(_rows(c), width), s.reshape(_rows(s), s.shape[-1]), float(tensor_scale),
                                  scale, tr, tc, packed, k)
    return _like(codes, _moveaxis_out(values.reshape(c.shape[:-1] + (k,)), axis))


def nvfp4_quantize(x: Any, block: str = "1x16", axis: int = -1, round: str = "nearest-even", *, seed: int = 0,
                   packed: bool = False) -> Tuple[Any, Any, float]:
    """NVFP4 (NVIDIA; torchao's nvfp4 rule): E2M1 values, an E4M3 scale per block, an fp32 tensor scale.

    tensor scale t = max(amax / (6 * 448), 2^-117); block scale s = e4m3(clip((amax_b / 6) / t, 2^-9, 448));
    element code = e2m1(clip(x / (t s), -6, 6)); value = e2m1 x s x t.

    block "1x16": 16 consecutive values along `axis` share a scale (the last block of a row may be shorter);
    codes have x's shape (one per byte, sign in bit 3; packed: two per byte along `axis`, the low nibble
    first, ceil(K / 2) bytes), scales x's shape with `axis` of length ceil(K / 16).
    block "16x16": x must be 2-D; 16 x 16 tiles share a scale (a matrix and its transpose quantise to the
    same values), scales [ceil(R / 16), ceil(C / 16)], `axis` must be -1 (packing runs along the rows).
    round: "nearest-even" or "stochastic" (up with probability equal to the distance from the value below,
    from a counter-based draw of (seed, element index in the [rows, K] view with `axis` last)).
    Returns (codes uint8, scales uint8 E4M3 codes, tensor scale). x holding inf/NaN is a ValueError.
    """
    return _fp4_quantize("nvfp4", x, block, axis, round, seed, packed, False)


def nvfp4_dequantize(codes: Any, scales: Any, tensor_scale: float, block: str = "1x16", axis: int = -1, *,
                     packed: bool = False, count: Optional[int] = None) -> Any:
    """NVFP4 codes, E4M3 block scales and tensor scale (as nvfp4_quantize returns them) -> float32 values.

    Each value is e2m1 x s (exact) times the tensor scale, rounded once to float32. With packed codes,
    `count` is the number of values along `axis` (default 2 x the bytes).
    """
    return _fp4_dequantize("nvfp4", codes, scales, tensor_scale, block, axis, packed, count)


def mxfp4_quantize(x: Any, block: str = "1x32", axis: int = -1, round: str = "nearest-even", *, seed: int = 0,
                   headroom: bool = False, packed: bool = False) -> Tuple[Any, Any, float]:
    """MXFP4 (OCP MX) as the FP4 training recipes cast it: E2M1 values, an E8M0 scale per block.

    block exponent e = clip(floor(log2 amax_b) - 2, -127, 127) (E8M0 code e + 127; an all-zero block -127);
    element code = e2m1(clip(x' x 2^-e, -6, 6)) with x' = x, or 3/4 x x with `headroom` (Tseng et al.: the
    recipes' stochastic casts, so that rounding up never clips); value = e2m1 x 2^e x tensor scale, the
    tensor scale 1, or 4/3 with headroom. With round "nearest-even" and no headroom, the codes and scales
    are mx_quantize(x, "mxfp4")'s. Blocks, axis, rounding, packing and errors as nvfp4_quantize
    ("1x32" along `axis`, or "32x32" tiles of a 2-D array). Returns (codes, E8M0 scale codes, tensor scale).
    """
    return _fp4_quantize("mxfp4", x, block, axis, round, seed, packed, headroom)


def mxfp4_dequantize(codes: Any, scales: Any, tensor_scale: float, block: str = "1x32", axis: int = -1, *,
                     packed: bool = False, count: Optional[int] = None) -> Any:
    """MXFP4 codes, E8M0 scales and tensor scale (as mxfp4_quantize returns them) -> float32 values."""
    return _fp4_dequantize("mxfp4", codes, scales, tensor_scale, block, axis, packed, count)


def rht(x: Any, axis: int = 0, seed: int = 0, random: bool = True) -> Any:
    """The FP4 recipes' 16-point Hadamard transform of a 2-D float32 array (mantissa's own, bit for bit).

    Every group of 16 consecutive entries along `axis` is replaced by H D g / 4 (H the 16 x 16
    Sylvester-Hadamard matrix, D the signs drawn from `seed` as the recipes' ``rht_seed``, all +1 with
    random=False); a last shorter group is unchanged. Orthogonal: rotating both operands of a product
    along its contraction leaves the product unchanged in exact arithmetic.
    """
    if _ndim(x) != 2:
        raise ValueError("x: expected a 2-D array")
    a = axis + 2 if axis < 0 else axis
    if a not in (0, 1):
        raise ValueError(f"axis {axis} is out of range for a 2-D array")
    return _like(x, _core.rht(x, a, seed, random))


def _rows(a: _np.ndarray) -> int:
    """The rows of a's [rows, last axis] view (reshape(-1, 0) cannot infer them)."""
    return int(_np.prod(a.shape[:-1], dtype=_np.int64))


def _ndim(x: Any) -> int:
    return len(x.shape)


def _moveaxis_in(x: Any, axis: int) -> Any:
    n = _ndim(x)
    if not -n <= axis < n:
        raise ValueError(f"axis {axis} is out of range for an array of {n} dimensions")
    if axis in (-1, n - 1):
        return x
    a = _np.from_dlpack(x) if not _is_numpy(x) else x
    return _np.ascontiguousarray(_np.moveaxis(a, axis, -1))


def _moveaxis_out(r: Any, axis: int) -> Any:
    if axis in (-1, r.ndim - 1):
        return r
    return _np.ascontiguousarray(_np.moveaxis(r, -1, axis))


def formats() -> List[Dict[str, Any]]:
    """Every preset format with the fields of ``mantissa formats --json``."""
    return _core.formats()


def format_info(format: str) -> Dict[str, Any]:
    """One preset or user-defined ``eXmY[:option=value...]`` format's properties."""
    return _core.format_info(format)


def as_ml_dtypes(codes: Any, format: str) -> _np.ndarray:
    """Codes viewed (no copy) as the ml_dtypes array of the same format."""
    import ml_dtypes

    name = _ML_DTYPES.get(format)
    if name is None:
        raise ValueError(f"format: ml_dtypes has no dtype for '{format}' (it has {', '.join(_ML_DTYPES)})")
    a = codes if _is_numpy(codes) else _np.from_dlpack(codes)
    dtype = _np.dtype(getattr(ml_dtypes, name, None) or getattr(_np, name))
    if a.dtype.itemsize != dtype.itemsize:
        raise TypeError(f"codes: {a.dtype} codes cannot be viewed as {name}")
    return a.view(dtype)


def from_ml_dtypes(x: _np.ndarray) -> _np.ndarray:
    """An ml_dtypes (or float16) array's codes as unsigned integers, no copy."""
    return x.view({1: _np.uint8, 2: _np.uint16, 4: _np.uint32}[x.dtype.itemsize])


def recipes() -> List[Dict[str, Any]]:
    """Every registered recipe with all its settings (the keys ``--set`` takes)."""
    return [_json.loads(r) for r in _core.recipes()]


def recipe(name: str, set: Sequence[str] = ()) -> Dict[str, Any]:
    """A recipe by name with ``key=value`` overrides, validated as ``mantissa train --set`` does."""
    return _json.loads(_core.recipe(name, list(set)))
