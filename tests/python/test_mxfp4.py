"""mantissa.mxfp4_quantize / mxfp4_dequantize and the MXFP4 recipes of mantissa.torch.wrap
against MXFP4 written here with numpy and ml_dtypes from the OCP definition:

    e = clip(floor(log2 amax_b) - 2, -127, 127)      (an all-zero block: -127; E8M0 code e + 127)
    q = e2m1fn(clip(x' x 2^-e, -6, 6))               (ml_dtypes nearest-even, or the stochastic draw)
    x' = x, or 3/4 x x with headroom (tensor scale 4/3); value = q x 2^e x tensor scale

with the stochastic draws and the E2M1 helpers of test_nvfp4.py.
"""

import ml_dtypes
import numpy as np
import pytest

import mantissa
from test_nvfp4 import draws, e2m1_codes, expand, sample, tile_max, to_numpy, to_torch

F32 = np.float32
MASK64 = (1 << 64) - 1


def reference(x, tr=1, tc=32, stochastic=False, seed=0, headroom=False):
    """(codes, scale codes, tensor scale, values) of x [R, C] in tr x tc tiles."""
    amax = tile_max(x, tr, tc)
    e = np.where(amax > 0, np.clip(np.frexp(amax)[1] - 1 - 2, -127, 127), -127)
    factor = expand(np.ldexp(F32(1), -e).astype(F32), tr, tc, x.shape)
    xv = x * F32(0.75) if headroom else x
    codes = e2m1_codes(xv * factor, stochastic, draws(seed, x.size) if stochastic else None)
    t = F32(4.0 / 3.0) if headroom else F32(1)
    block = expand(np.ldexp(F32(1), e).astype(F32), tr, tc, x.shape)
    values = (codes.view(ml_dtypes.float4_e2m1fn).astype(F32) * block) * t
    return codes, (e + 127).astype(np.uint8), float(t), values


@pytest.mark.parametrize("shape", [(8, 64), (5, 45), (33, 32)])
def test_1x32_blocks_match_the_definition_and_mx_quantize(shape):
    x = sample(shape, 11)
    codes, scales, t = mantissa.mxfp4_quantize(x)
    rc, rs, rt, rv = reference(x)
    assert scales.shape == (shape[0], -(-shape[1] // 32)) and t == rt == 1.0
    np.testing.assert_array_equal(scales, rs)
    np.testing.assert_array_equal(codes, rc)
    np.testing.assert_array_equal(mantissa.mxfp4_dequantize(codes, scales, t), rv)
    mc, ms = mantissa.mx_quantize(x, "mxfp4")  # the formats module's MX quantiser: the same bits
    np.testing.assert_array_equal(mc, codes)
    np.testing.assert_array_equal(ms, scales)


@pytest.mark.parametrize("headroom", [False, True])
def test_stochastic_rounding_and_headroom_match_the_definition(headroom):
    x = sample((16, 96), 12)
    for seed in (0, 77):
        codes, scales, t = mantissa.mxfp4_quantize(x, round="stochastic", seed=seed, headroom=headroom)
        rc, rs, rt, rv = reference(x, stochastic=True, seed=seed, headroom=headroom)
        assert t == rt
        np.testing.assert_array_equal(codes, rc)
        np.testing.assert_array_equal(scales, rs)
        np.testing.assert_array_equal(mantissa.mxfp4_dequantize(codes, scales, t), rv)
    # Headroom: the block's largest value x 3/4 never reaches past 6 (nothing clips); without it, it may.
    y = np.full((64, 32), 7.5, F32)  # amax 7.5 -> e = 0, 7.5 clips to 6
    c, _, t = mantissa.mxfp4_quantize(y, round="stochastic", seed=1, headroom=headroom)
    v = c.view(ml_dtypes.float4_e2m1fn).astype(F32) * F32(t)
    if headroom:  # 5.625 rounds to 4 or 6 with P(6) = 0.8125; times 4/3: mean 7.5
        assert set(np.unique(c)) == {6, 7} and abs(float(v.mean(dtype=np.float64)) - 7.5) < 0.1
    else:
        assert (c == 7).all()


def test_axis_tiles_and_packing():
    x = sample((3, 70, 5), 13)  # blocks along axis 1: 32, 32 and 6 per (i, k)
    codes, scales, t = mantissa.mxfp4_quantize(x, axis=1)
    moved = np.moveaxis(x, 1, -1).reshape(-1, 70)
    rc, rs, _, rv = reference(moved)
    assert codes.shape == x.shape and scales.shape == (3, 3, 5)
    np.testing.assert_array_equal(np.moveaxis(codes, 1, -1).reshape(-1, 70), rc)
    np.testing.assert_array_equal(np.moveaxis(scales, 1, -1).reshape(-1, 3), rs)
    pc, ps, pt = mantissa.mxfp4_quantize(x, axis=1, packed=True)
    assert pc.shape == (3, 35, 5)
    np.testing.assert_array_equal(mantissa.mxfp4_dequantize(pc, ps, pt, axis=1, packed=True, count=70),
                                  mantissa.mxfp4_dequantize(codes, scales, t, axis=1))
    w = sample((40, 72), 14)
    c2, s2, t2 = mantissa.mxfp4_quantize(w, block="32x32")
    rc2, rs2, _, rv2 = reference(w, 32, 32)
    assert s2.shape == (2, 3)
    np.testing.assert_array_equal(c2, rc2)
    np.testing.assert_array_equal(s2, rs2)
    np.testing.assert_array_equal(mantissa.mxfp4_dequantize(c2, s2, t2, block="32x32"), rv2)


def test_bad_inputs():
    x = sample((4, 32), 15)
    with pytest.raises(ValueError, match="block"):
        mantissa.mxfp4_quantize(x, block="1x16")
    with pytest.raises(ValueError, match="round"):
        mantissa.mxfp4_quantize(x, round="up")
    bad = x.copy()
    bad[0, 0] = np.nan
    with pytest.raises(ValueError, match="inf or NaN"):
        mantissa.mxfp4_quantize(bad)
    with pytest.raises(ValueError, match="headroom"):
        mantissa._core.fp4_quantize(x, "nvfp4", 1, 16, "nearest-even", 0, False, True)


# mantissa.torch: the three products of one nn.Linear under each MXFP4 recipe, cast by hand.

def mx_hand(a, axis=-1, stochastic=False, seed=0):
    """a's MXFP4 values in blocks of 32 along `axis` of a 2-D array (stochastic casts with headroom; the
    draws indexed by position in the array as it lies, as the engine's casts draw them)."""
    a = np.asarray(a, dtype=F32)
    tr, tc = (32, 1) if axis in (0, -2) else (1, 32)
    return reference(a, tr, tc, stochastic=stochastic, seed=seed, headroom=stochastic)[3]


def engine_seed(rht_seed, call):
    """The draw seed of the call-th stochastic cast of a model's FP4 quantiser (quant/fp4.hpp), no update done."""
    return (rht_seed * 0x9E3779B97F4A7C15 ^ call) & MASK64


def bf16(a):
    return np.asarray(a, F32).astype(ml_dtypes.bfloat16).astype(F32)


def run_layer(recipe):
    """One nn.Linear(64, 48) wrapped in `recipe` (rht_seed 5): forward and backward on fixed x, dy."""
    torch = pytest.importorskip("torch")
    import mantissa.torch as mt

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 48))  # in: two blocks of 32; out: 32 + 16
    w, b = to_numpy(model[0].weight).copy(), to_numpy(model[0].bias).copy()
    mt.wrap(model, recipe, set=["rht_seed=5"])
    x, dy = sample((64, 64), 16), sample((64, 48), 17)  # M = 64: two blocks of 32 rows
    xt = to_torch(x).requires_grad_()
    y = model(xt)
    y.backward(to_torch(dy))
    return torch, model, (w, b, x, dy), y.detach(), xt.grad


def test_torch_wrap_mxfp4_matches_the_casts_by_hand():
    # Tseng et al.: bf16 forward; backward products in MXFP4, every input rounded stochastically
    # (blocks x 3/4, tensor scale 4/3), both backward products' operands rotated along their contraction.
    torch, model, (w, b, x, dy), y, dx = run_layer("mxfp4")
    F = torch.nn.functional
    assert torch.equal(y, F.linear(to_torch(bf16(x)), to_torch(bf16(w)), to_torch(b)))
    # The engine's draw order: forward: wgrad x, dgrad W (the backward operands, cast in the forward pass);
    # backward: dgrad dy, wgrad dy.
    s = [engine_seed(5, k) for k in (2, 1, 3, 0)]  # dgrad dy, dgrad W, wgrad dy, wgrad x
    dyd = mx_hand(mantissa.rht(dy, 1, seed=5), -1, True, s[0])  # (M, out): 1x32 along out, rotated along out
    wd = mx_hand(mantissa.rht(w, 0, seed=5), 0, True, s[1])  # (out, in): blocks along out, rotated along out
    assert torch.equal(dx, to_torch(dyd) @ to_torch(wd))
    dyw = mx_hand(mantissa.rht(dy, 0, seed=5), 0, True, s[2])  # blocks of 32 rows along M, rotated along M
    xw = mx_hand(mantissa.rht(x, 0, seed=5), 0, True, s[3])
    assert torch.equal(model[0].weight.grad, to_torch(dyw).t() @ to_torch(xw))
    assert torch.equal(model[0].bias.grad, to_torch(dy).sum(0))


def test_torch_wrap_mxfp4_naive_and_fwd_match_the_casts_by_hand():
    torch, model, (w, b, x, dy), y, dx = run_layer("mxfp4-naive")  # every product in MXFP4, nearest-even
    F = torch.nn.functional
    assert torch.equal(y, F.linear(to_torch(mx_hand(x)), to_torch(mx_hand(w)), to_torch(b)))  # 1x32 along in
    assert torch.equal(dx, to_torch(mx_hand(dy)) @ to_torch(mx_hand(w, 0)))  # along out
    assert torch.equal(model[0].weight.grad, to_torch(mx_hand(dy, 0)).t() @ to_torch(mx_hand(x, 0)))  # along M
    torch, model, (w, b, x, dy), y, dx = run_layer("mxfp4-fwd")  # mxfp4 with the forward in MXFP4
    assert torch.equal(y, F.linear(to_torch(mx_hand(x)), to_torch(mx_hand(w)), to_torch(b)))
