"""mantissa.mx_quantize / mx_dequantize against gfloat's OCP MX block formats
and ml_dtypes element casts."""

import gfloat
import gfloat.formats as gf
import ml_dtypes
import numpy as np
import pytest

import mantissa

GF_MX = {"mxfp8_e4m3": gf.format_info_mxfp8_e4m3, "mxfp8_e5m2": gf.format_info_mxfp8_e5m2,
         "mxfp6_e2m3": gf.format_info_mxfp6_e2m3, "mxfp6_e3m2": gf.format_info_mxfp6_e3m2,
         "mxfp4": gf.format_info_mxfp4_e2m1, "mxint8": gf.format_info_mxint8}


def blocks_input(rows, k, seed):
    rng = np.random.default_rng(seed)
    # Each row's scale differs by orders of magnitude; some exact zeros, a zero block.
    x = rng.standard_normal((rows, k)) * 2.0 ** rng.integers(-20, 20, (rows, 1))
    x[rng.random((rows, k)) < 0.05] = 0
    x[0, :32] = 0
    return x.astype(np.float32)


@pytest.mark.parametrize("fmt", sorted(GF_MX))
def test_mx_values_match_gfloat(fmt):
    x = blocks_input(16, 96, seed=1)
    codes, scales = mantissa.mx_quantize(x, fmt)
    assert codes.shape == x.shape and scales.shape == (16, 3) and codes.dtype == scales.dtype == np.uint8
    y = mantissa.mx_dequantize(codes, scales, fmt)
    fi = GF_MX[fmt]
    ref = np.concatenate([gfloat.quantize_block(fi, b.astype(np.float64), gfloat.compute_scale_amax)
                          for b in x.reshape(-1, 32)]).reshape(x.shape)
    assert np.array_equal(y, ref.astype(np.float32))
    assert scales[0, 0] == 0  # all-zero block: 2^-127


def test_mxfp8_codes_are_ml_dtypes_casts_of_the_scaled_block():
    x = blocks_input(8, 64, seed=2)
    codes, scales = mantissa.mx_quantize(x, "mxfp8_e4m3")
    e = scales.astype(np.int64) - 127  # block exponents
    scaled = x / np.repeat(np.ldexp(1.0, e), 32, axis=1)
    ref = np.clip(scaled, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    assert np.array_equal(codes, mantissa.from_ml_dtypes(ref))
    # Floor rule: E = floor(log2 amax) - 8 (e4m3fn's max exponent).
    amax = np.abs(x).reshape(8, 2, 32).max(-1)
    nz = amax > 0
    assert np.array_equal(e[nz], np.floor(np.log2(amax[nz])).astype(np.int64) - 8)


def test_ceil_scales_never_clip():
    x = blocks_input(8, 64, seed=3)
    codes, scales = mantissa.mx_quantize(x, "mxfp8_e4m3", scale_rounding="ceil")
    e = scales.astype(np.int64) - 127
    amax = np.abs(x.astype(np.float64)).reshape(8, 2, 32).max(-1)
    nz = amax > 0
    # The smallest E with amax x 2^-E <= 448.
    assert (np.ldexp(amax[nz], -e[nz]) <= 448).all() and (np.ldexp(amax[nz], -(e[nz] - 1)) > 448).all()
    y = mantissa.mx_dequantize(codes, scales, "mxfp8_e4m3")
    ref = (x / np.repeat(np.ldexp(1.0, e), 32, axis=1)).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    assert np.array_equal(y, (ref * np.repeat(np.ldexp(1.0, e), 32, axis=1)).astype(np.float32))


def test_short_last_block_axis_and_nan_blocks():
    x = blocks_input(5, 40, seed=4)  # 40 = 32 + a short block of 8
    x[2, 35] = np.nan
    codes, scales = mantissa.mx_quantize(x, "mxfp8_e5m2")
    assert scales.shape == (5, 2) and scales[2, 1] == 0xFF
    y = mantissa.mx_dequantize(codes, scales, "mxfp8_e5m2")
    assert np.isnan(y[2, 32:]).all() and not np.isnan(y[2, :32]).any()
    # Each row's blocks are its own: the same as quantising the row alone.
    for r in (0, 4):
        c1, s1 = mantissa.mx_quantize(np.ascontiguousarray(x[r]), "mxfp8_e5m2")
        assert np.array_equal(c1, codes[r]) and np.array_equal(s1, scales[r])
    # axis=0: blocks down the columns, the same as along the rows of the transpose.
    xt = np.ascontiguousarray(x.T)  # (40, 5)
    c0, s0 = mantissa.mx_quantize(xt, "mxfp8_e5m2", axis=0)
    assert np.array_equal(c0, codes.T) and np.array_equal(s0, scales.T)
    y0 = mantissa.mx_dequantize(c0, s0, "mxfp8_e5m2", axis=0)
    assert np.array_equal(y0, y.T, equal_nan=True)


def test_out_arrays_receive_the_same_codes_and_scales():
    x = blocks_input(6, 40, seed=5)  # whole and short blocks
    codes, scales = mantissa.mx_quantize(x, "mxfp8_e4m3")
    c, s = np.full(x.shape, 0xAA, np.uint8), np.full((6, 2), 0xAA, np.uint8)
    got = mantissa.mx_quantize(x, "mxfp8_e4m3", out=(c, s))
    assert got[0] is c and got[1] is s
    assert np.array_equal(c, codes) and np.array_equal(s, scales)
    with pytest.raises(ValueError, match="wrong shape"):
        mantissa.mx_quantize(x, "mxfp8_e4m3", out=(c, np.empty((6, 3), np.uint8)))
    with pytest.raises(TypeError, match="out"):
        mantissa.mx_quantize(x, "mxfp8_e4m3", out=(c.astype(np.uint16), s))
    with pytest.raises(TypeError, match="tuple"):
        mantissa.mx_quantize(x, "mxfp8_e4m3", out=c)
    with pytest.raises(ValueError, match="last axis"):
        mantissa.mx_quantize(x, "mxfp8_e4m3", axis=0, out=(c, s))
