"""mantissa.nvfp4_quantize / nvfp4_dequantize against an NVFP4 written here
with numpy and ml_dtypes from the definition (torchao's nvfp4 rule):

    t = max(amax / (6 * 448), 2^-117)                   (float32)
    s = e4m3fn(clip((amax_b / 6) / t, 2^-9, 448))       (ml_dtypes, nearest-even)
    q = e2m1fn(clip(x / (t * s), -6, 6))                (ml_dtypes, nearest-even)

and, for stochastic rounding, the counter-based draw of formats/fp4.hpp
re-implemented in numpy: the neighbouring E2M1 values below and above, up
when (|y| - lo) / (hi - lo) > draw x 2^-24.
"""

import ml_dtypes
import numpy as np
import pytest

import mantissa

F32 = np.float32
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)


def sample(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_t(2.0, shape) * 2.0 ** rng.integers(-6, 6, shape[:-1] + (1,))
    x[rng.random(shape) < 0.05] = 0
    return x.astype(F32)


def tile_max(a, tr, tc):
    """Max of |a| over tr x tc tiles of a [R, C] array (edge tiles shorter): [ceil(R/tr), ceil(C/tc)]."""
    r, c = a.shape
    pad = np.zeros((-(-r // tr) * tr, -(-c // tc) * tc), dtype=a.dtype)
    pad[:r, :c] = np.abs(a)
    return pad.reshape(pad.shape[0] // tr, tr, pad.shape[1] // tc, tc).max(axis=(1, 3))


def expand(s, tr, tc, shape):
    return np.repeat(np.repeat(s, tr, axis=0), tc, axis=1)[:shape[0], :shape[1]]


def splitmix_key(seed):
    m = (1 << 64) - 1
    z = (seed + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    z ^= z >> 31
    return np.uint32(z & 0xFFFFFFFF), np.uint32(z >> 32)


def draws(seed, n):
    klo, khi = splitmix_key(seed)
    i = np.arange(n, dtype=np.uint64)
    lo, hi = (i & np.uint64(0xFFFFFFFF)).astype(np.uint32), (i >> np.uint64(32)).astype(np.uint32)
    with np.errstate(over="ignore"):
        h = ((lo + klo) * np.uint32(0x9E3779B1)) ^ (hi * np.uint32(0x85EBCA77) + khi)
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h >> np.uint32(8)


def e2m1_codes(y, stochastic=False, draw=None):
    if not stochastic:
        return np.clip(y, F32(-6), F32(6)).astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    a = np.minimum(np.abs(y).astype(np.float64), 6.0)
    lo = np.searchsorted(E2M1, a, side="right") - 1
    hi = np.minimum(lo + 1, 7)
    with np.errstate(invalid="ignore"):  # hi == lo at 6: the fraction is unused there
        frac = np.where(hi > lo, (a - E2M1[lo]) / (E2M1[hi] - E2M1[lo]), 0.0)
    mag = np.where(frac > draw.reshape(a.shape) * 2.0 ** -24, hi, lo)
    return (mag | np.where(np.signbit(y), 8, 0)).astype(np.uint8)


def reference(x, tr, tc, stochastic=False, seed=0):
    """(codes, scale codes, tensor scale, values) of x [R, C]."""
    t = max(F32(np.abs(x).max()) / F32(6 * 448), F32(2.0 ** -117))
    want_s = np.clip((tile_max(x, tr, tc) / F32(6)) / t, F32(2.0 ** -9), F32(448))
    s8 = want_s.astype(ml_dtypes.float8_e4m3fn)
    s = expand(s8.astype(F32), tr, tc, x.shape)
    y = x / (t * s)
    codes = e2m1_codes(y, stochastic, draws(seed, x.size) if stochastic else None)
    values = (codes.view(ml_dtypes.float4_e2m1fn).astype(F32) * s) * t
    return codes, s8.view(np.uint8), t, values


@pytest.mark.parametrize("shape", [(8, 64), (5, 45), (33, 16)])
def test_1x16_blocks_match_the_definition(shape):
    x = sample(shape, 1)
    codes, scales, t = mantissa.nvfp4_quantize(x)
    rc, rs, rt, rv = reference(x, 1, 16)
    assert codes.dtype == scales.dtype == np.uint8
    assert scales.shape == (shape[0], -(-shape[1] // 16))
    assert t == rt
    np.testing.assert_array_equal(scales, rs)
    np.testing.assert_array_equal(codes, rc)
    np.testing.assert_array_equal(mantissa.nvfp4_dequantize(codes, scales, t), rv)


def test_16x16_blocks_match_the_definition_and_survive_transposition():
    x = sample((40, 56), 2)
    codes, scales, t = mantissa.nvfp4_quantize(x, block="16x16")
    rc, rs, rt, rv = reference(x, 16, 16)
    assert scales.shape == (3, 4) and t == rt
    np.testing.assert_array_equal(scales, rs)
    np.testing.assert_array_equal(codes, rc)
    v = mantissa.nvfp4_dequantize(codes, scales, t, block="16x16")
    np.testing.assert_array_equal(v, rv)
    ct, st, tt = mantissa.nvfp4_quantize(np.ascontiguousarray(x.T), block="16x16")
    np.testing.assert_array_equal(mantissa.nvfp4_dequantize(ct, st, tt, block="16x16"), v.T)


def test_blocks_along_another_axis_and_packed_codes():
    x = sample((3, 37, 5), 3)  # blocks along axis 1: two of 16 and one of 5 per (i, k)
    codes, scales, t = mantissa.nvfp4_quantize(x, axis=1)
    moved = np.moveaxis(x, 1, -1).reshape(-1, 37)
    rc, rs, rt, rv = reference(moved, 1, 16)
    assert codes.shape == x.shape and scales.shape == (3, 3, 5) and t == rt
    np.testing.assert_array_equal(np.moveaxis(codes, 1, -1).reshape(-1, 37), rc)
    np.testing.assert_array_equal(np.moveaxis(scales, 1, -1).reshape(-1, 3), rs)
    pc, ps, pt = mantissa.nvfp4_quantize(x, axis=1, packed=True)
    assert pc.shape == (3, 19, 5)
    mc = np.moveaxis(pc, 1, -1).reshape(-1, 19)
    np.testing.assert_array_equal(mc & 0xF, rc[:, 0::2])
    np.testing.assert_array_equal(mc[:, :18] >> 4, rc[:, 1::2])
    assert not (mc[:, 18] >> 4).any()
    full = mantissa.nvfp4_dequantize(codes, scales, t, axis=1)
    np.testing.assert_array_equal(mantissa.nvfp4_dequantize(pc, ps, pt, axis=1, packed=True, count=37), full)
    np.testing.assert_array_equal(np.moveaxis(full, 1, -1).reshape(-1, 37), rv)
    # Packed ones agree with mantissa's generic nibble decoder too.
    np.testing.assert_array_equal(mantissa.decode(mc, "e2m1fn", packed=True, count=37), mantissa.decode(rc, "e2m1fn"))


def test_stochastic_rounding_matches_the_draws_and_is_unbiased():
    x = sample((16, 64), 4)
    for seed in (0, 12345):
        codes, scales, t = mantissa.nvfp4_quantize(x, round="stochastic", seed=seed)
        rc, rs, rt, rv = reference(x, 1, 16, stochastic=True, seed=seed)
        np.testing.assert_array_equal(codes, rc)
        np.testing.assert_array_equal(scales, rs)
    c2, _, _ = mantissa.nvfp4_quantize(x, round="stochastic", seed=1)
    assert not np.array_equal(c2, codes)
    # 1.2 x (a block scale that keeps it at 1.2) rounds to 1.5 with probability 0.4.
    y = np.full((256, 16), 1.2, dtype=F32)
    y[:, 0] = 6.0
    hits = []
    for seed in range(4):
        c, _, _ = mantissa.nvfp4_quantize(y, round="stochastic", seed=seed)
        v = c[:, 1:].view(ml_dtypes.float4_e2m1fn).astype(F32)
        assert set(np.unique(v)) <= {F32(1.0), F32(1.5)}
        hits.append((v == 1.5).mean())
    p = float(np.mean(hits))
    assert abs(p - 0.4) < 5 * np.sqrt(0.24 / (4 * 256 * 15))


def to_torch(a):
    """numpy -> torch through DLPack (torch's own numpy bridge may be missing)."""
    import torch

    return torch.utils.dlpack.from_dlpack(np.ascontiguousarray(a).__dlpack__())


def to_numpy(t):
    return np.from_dlpack(t.detach().contiguous())


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    x = sample((4, 32), 5)
    c, s, t = mantissa.nvfp4_quantize(to_torch(x))
    assert isinstance(c, torch.Tensor) and isinstance(s, torch.Tensor)
    rc, rs, rt, _ = reference(x, 1, 16)
    np.testing.assert_array_equal(to_numpy(c), rc)
    assert t == rt


def test_bad_inputs():
    x = sample((4, 32), 6)
    with pytest.raises(ValueError, match="block"):
        mantissa.nvfp4_quantize(x, block="1x32")
    with pytest.raises(ValueError, match="round"):
        mantissa.nvfp4_quantize(x, round="toward-zero")
    with pytest.raises(ValueError, match="16x16"):
        mantissa.nvfp4_quantize(x[None], block="16x16")
    with pytest.raises(TypeError, match="float32"):
        mantissa.nvfp4_quantize(x.astype(np.float64))
    bad = x.copy()
    bad[1, 3] = np.inf
    with pytest.raises(ValueError, match="inf or NaN"):
        mantissa.nvfp4_quantize(bad)
    c, s, t = mantissa.nvfp4_quantize(x)
    with pytest.raises(ValueError, match="E2M1"):
        mantissa.nvfp4_dequantize(c + 16, s, t)
    with pytest.raises(ValueError, match="scales"):
        mantissa.nvfp4_dequantize(c, s[:, :1], t)


def cast_by_hand(a, axis=-1, block="1x16"):
    """a's NVFP4 values (nearest-even) from the reference above: 1x16 along `axis` of a 2-D array, or 16x16."""
    a = np.asarray(a, dtype=F32)
    if block == "16x16":
        return reference(a, 16, 16)[3]
    if axis in (0, -2):
        return np.ascontiguousarray(reference(np.ascontiguousarray(a.T), 1, 16)[3].T)
    return reference(a, 1, 16)[3]


def test_rht_is_orthogonal_and_preserves_products():
    x, y = sample((48, 5), 7).astype(np.float64), sample((48, 3), 8).astype(np.float64)
    rx, ry = mantissa.rht(x.astype(F32), 0, seed=3), mantissa.rht(y.astype(F32), 0, seed=3)
    np.testing.assert_allclose(rx.astype(np.float64).T @ ry, x.T @ y, rtol=1e-4, atol=1e-3)
    h = np.array([[(-1) ** bin(i & j).count("1") for j in range(16)] for i in range(16)], dtype=np.float64) / 4
    d = mantissa.rht(np.eye(16, dtype=F32), 0, seed=3)  # Q = H D applied to the identity
    signs = np.diag(h.T @ d)  # H^T H D = D
    np.testing.assert_allclose(d, h * signs, atol=1e-7)
    assert set(np.round(signs).astype(int)) <= {-1, 1}


def test_torch_wrap_nvfp4_matches_the_casts_by_hand():
    torch = pytest.importorskip("torch")
    import mantissa.torch as mt

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48))
    w0, b0 = model[0].weight.detach().clone(), model[0].bias.detach().clone()
    mt.wrap(model, "nvfp4", set=["bf16_layers=none", "fp4_sr=none", "rht_seed=5"])
    x = to_torch(sample((64, 32), 9)).requires_grad_()
    dy = to_torch(sample((64, 48), 10))
    y = model(x)
    y.backward(dy)
    xq = to_torch(cast_by_hand(to_numpy(x)))
    wq = to_torch(cast_by_hand(to_numpy(w0), block="16x16"))
    assert torch.equal(y.detach(), torch.nn.functional.linear(xq, wq, b0))
    # dW = (Q dy)^T (Q x), both cast in blocks of 16 rows.
    dyw = to_torch(cast_by_hand(mantissa.rht(to_numpy(dy), 0, seed=5), axis=0))
    xw = to_torch(cast_by_hand(mantissa.rht(to_numpy(x), 0, seed=5), axis=0))
    assert torch.equal(model[0].weight.grad, dyw.t() @ xw)
    assert torch.equal(model[0].bias.grad, dy.sum(0))
    # dx = dy_q W_q: dy in 1x16 blocks along the outputs, W the forward's 16x16 cast.
    assert torch.equal(x.grad, to_torch(cast_by_hand(to_numpy(dy))) @ wq)
    with pytest.raises(ValueError, match="bf16_layers"):
        mt.wrap(torch.nn.Sequential(torch.nn.Linear(4, 4)), "nvfp4")
