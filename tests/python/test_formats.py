"""mantissa.quantize / encode / decode against ml_dtypes (nearest-even casts) and
gfloat (every rounding mode, saturation, stochastic rounding with the same draws)."""

import json
import math
import os
import subprocess

import gfloat
import gfloat.formats as gf
import ml_dtypes
import numpy as np
import pytest

import mantissa

# Every format mantissa shares with ml_dtypes (e8m0 is tested on its own).
ML = {
    "bf16": ml_dtypes.bfloat16, "fp16": np.float16, "e5m2": ml_dtypes.float8_e5m2,
    "e5m2fnuz": ml_dtypes.float8_e5m2fnuz, "e4m3fn": ml_dtypes.float8_e4m3fn,
    "e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "e4m3": ml_dtypes.float8_e4m3,
    "e4m3b11fnuz": ml_dtypes.float8_e4m3b11fnuz, "e3m4": ml_dtypes.float8_e3m4,
    "e3m2fn": ml_dtypes.float6_e3m2fn, "e2m3fn": ml_dtypes.float6_e2m3fn, "e2m1fn": ml_dtypes.float4_e2m1fn,
}
NO_NAN = {"e3m2fn", "e2m3fn", "e2m1fn"}  # no NaN, no inf: mantissa saturates and sends NaN to +0

# Every format mantissa shares with gfloat.
GF = {"bf16": gf.format_info_bfloat16, "fp16": gf.format_info_binary16, "e4m3fn": gf.format_info_ocp_e4m3,
      "e5m2": gf.format_info_ocp_e5m2, "e2m3fn": gf.format_info_ocp_e2m3, "e3m2fn": gf.format_info_ocp_e3m2,
      "e2m1fn": gf.format_info_ocp_e2m1}
MODES = {"nearest-even": gfloat.RoundMode.TiesToEven, "nearest-away": gfloat.RoundMode.TiesToAway,
         "toward-zero": gfloat.RoundMode.TowardZero, "up": gfloat.RoundMode.TowardPositive,
         "down": gfloat.RoundMode.TowardNegative}


def grid_values(fmt: str, seed: int = 0) -> np.ndarray:
    """Every value of the format, the midpoints between neighbours and the fp32
    neighbours of those (the rounding boundaries), +-0, +-inf, NaN, values past
    the max and below the min subnormal, and random values over the range."""
    info = mantissa.format_info(fmt)
    if info["storage_bytes"] == 1:
        v = mantissa.decode(np.arange(1 << info["total_bits"], dtype=np.uint8), fmt)
    else:  # 16-bit formats: a random sample of codes
        v = mantissa.decode(np.random.default_rng(seed).integers(0, 1 << 16, 4096, dtype=np.uint16), fmt)
    v = np.unique(v[np.isfinite(v)].astype(np.float64))
    mids = (v[1:] + v[:-1]) / 2
    big = np.array([info["max"] * 2, info["max"] * 1.5, -info["max"] * 1.75, 1e30, -1e30])
    base = np.concatenate([v, mids, np.clip(big, -3e38, 3e38)]).astype(np.float32)
    near = np.concatenate([np.nextafter(base, np.float32(np.inf)), np.nextafter(base, np.float32(-np.inf))])
    rng = np.random.default_rng(seed)
    emax = math.log2(info["max"])
    rand = (rng.choice([-1, 1], 20000) * 2.0 ** rng.uniform(math.log2(info["min_normal"]) - 4, emax + 1, 20000))
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45], dtype=np.float32)
    return np.concatenate([base, near, np.clip(rand, -3e38, 3e38).astype(np.float32), special])


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal as fp32 bit patterns, with every NaN equal to every NaN."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(a[~nan].view(np.uint32), b[~nan].view(np.uint32)))


@pytest.mark.parametrize("fmt", sorted(ML))
def test_quantize_and_encode_match_ml_dtypes(fmt):
    x = grid_values(fmt)
    if fmt in NO_NAN:  # ml_dtypes' NaN/overflow rules differ there; checked below
        x = x[np.isfinite(x) & (np.abs(x) <= mantissa.format_info(fmt)["max"])]
    with np.errstate(over="ignore"):  # overflow to inf is part of the test
        ref = x.astype(ML[fmt])
    assert same(mantissa.quantize(x, fmt), ref.astype(np.float32))
    codes = mantissa.encode(x, fmt)
    ref_codes = mantissa.from_ml_dtypes(ref)
    if fmt == "e2m1fn" or fmt in NO_NAN:
        ref_codes = ref_codes & ((1 << mantissa.format_info(fmt)["total_bits"]) - 1)
    nan = np.isnan(ref.astype(np.float32))
    assert np.array_equal(codes[~nan], ref_codes[~nan])
    assert np.isnan(mantissa.decode(codes[nan], fmt)).all()
    # Codes view as the ml_dtypes array and back without copies.
    if ML[fmt] is not np.float16:
        view = mantissa.as_ml_dtypes(codes, fmt)
        assert view.dtype == np.dtype(ML[fmt]) and np.shares_memory(view, codes)
        assert same(mantissa.decode(view, fmt), view.astype(np.float32))


@pytest.mark.parametrize("fmt", sorted(NO_NAN))
def test_formats_without_nan_saturate(fmt):
    m = mantissa.format_info(fmt)["max"]
    x = np.array([m * 4, -m * 4, np.inf, -np.inf, np.nan], np.float32)
    assert same(mantissa.quantize(x, fmt), [m, -m, m, -m, 0.0])


@pytest.mark.parametrize("fmt", sorted(GF))
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("saturate", [False, True])
def test_rounding_modes_match_gfloat(fmt, mode, saturate):
    x = grid_values(fmt, seed=1)
    x = x[np.isfinite(x)]
    if fmt in NO_NAN and not saturate:  # gfloat refuses overflow there; mantissa always saturates
        x = x[np.abs(x) <= mantissa.format_info(fmt)["max"]]
    ref = gfloat.round_ndarray(GF[fmt], x.astype(np.float64), MODES[mode], saturate)
    got = mantissa.quantize(x, fmt, mode, saturate=saturate)
    assert same(got, ref.astype(np.float32)), fmt + " " + mode


@pytest.mark.parametrize("fmt", ["bf16", "fp16", "e4m3fn", "e5m2", "e2m1fn"])
@pytest.mark.parametrize("bits", [4, 16])
def test_stochastic_rounding_matches_gfloat_with_the_same_draws(fmt, bits):
    x = grid_values(fmt, seed=2)
    x = x[np.isfinite(x) & (np.abs(x) <= mantissa.format_info(fmt)["max"])]
    seed = 1234
    draws = mantissa._core.stochastic_bits(seed, x.size, bits).astype(np.int64)
    # mantissa rounds up iff (remainder truncated to `bits` bits) + draw >= 2^bits:
    # gfloat's StochasticFastest rule.
    ref = gfloat.round_ndarray(GF[fmt], x.astype(np.float64), gfloat.RoundMode.StochasticFastest, True, draws, bits)
    got = mantissa.quantize(x, fmt, "stochastic", saturate=True, seed=seed, random_bits=bits)
    assert same(got, ref.astype(np.float32))


def test_stochastic_rounding_is_unbiased_with_the_right_probabilities():
    # 1 + f x 2^-3 lies between e4m3fn neighbours 1 and 1.125: P(up) = f.
    n = 1 << 18
    for f in [0.1, 0.25, 0.5, 0.8]:
        v = np.float32(1 + f * 0.125)
        y = mantissa.quantize(np.full(n, v, np.float32), "e4m3fn", "stochastic", seed=7, random_bits=16)
        assert set(np.unique(y)) <= {1.0, 1.125}
        p = float(np.mean(y == 1.125))
        sigma = math.sqrt(f * (1 - f) / n)
        assert abs(p - f) < 5 * sigma + 2 ** -16, (f, p)
        assert abs(float(np.mean(y, dtype=np.float64)) - float(v)) < 0.125 * (5 * sigma + 2 ** -16)
    # Same seed: same result whatever the threads; other seed: different draws.
    x = np.random.default_rng(3).standard_normal(1 << 17).astype(np.float32)  # above the threading threshold
    threads = mantissa.num_threads()
    try:
        mantissa.set_num_threads(2)
        a = mantissa.quantize(x, "e5m2", "stochastic", seed=5)
        mantissa.set_num_threads(1)
        assert same(a, mantissa.quantize(x, "e5m2", "stochastic", seed=5))
    finally:
        mantissa.set_num_threads(threads)
    assert not same(a, mantissa.quantize(x, "e5m2", "stochastic", seed=6))


def test_cli_scalar_encoder_agrees_with_the_array_kernels():
    x = grid_values("e4m3fn", seed=4)[:3000]
    codes = mantissa.encode(x, "e4m3fn", "up", saturate=True)
    ref = [mantissa._core.encode_scalar(float(v), "e4m3fn", "up", True) for v in x]
    assert np.array_equal(codes, np.array(ref, np.uint8))


def test_e8m0_powers_of_two():
    e = np.arange(-127, 128)
    x = np.ldexp(1.0, e).astype(np.float32)
    codes = mantissa.encode(x, "e8m0")
    assert np.array_equal(codes, (e + 127).astype(np.uint8))
    assert same(mantissa.decode(codes, "e8m0"), x)
    ref = mantissa.from_ml_dtypes(x.astype(ml_dtypes.float8_e8m0fnu))
    assert np.array_equal(codes, ref)


def test_packed_fp4_round_trip():
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((7, 33)) * 3).astype(np.float32)
    packed = mantissa.encode(x, "e2m1fn", packed=True)
    assert packed.shape == (7, 17) and packed.dtype == np.uint8
    codes = mantissa.encode(x, "e2m1fn")
    lo, hi = packed & 0xF, packed >> 4
    assert np.array_equal(lo, codes[:, 0::2]) and np.array_equal(hi[:, :16], codes[:, 1::2])
    assert (hi[:, 16] == 0).all()
    y = mantissa.decode(packed, "e2m1fn", packed=True, count=33)
    assert same(y, x.astype(ml_dtypes.float4_e2m1fn).astype(np.float32))
    with pytest.raises(ValueError, match="count"):
        mantissa.decode(packed, "e2m1fn", packed=True, count=30)
    with pytest.raises(ValueError, match="4 bits"):
        mantissa.encode(x, "e4m3fn", packed=True)


def test_formats_list_matches_ml_dtypes_finfo():
    by_name = {f["name"]: f for f in mantissa.formats()}
    assert set(ML) <= set(by_name)
    keys = {"name", "kind", "exponent_bits", "mantissa_bits", "total_bits", "storage_bytes", "bias", "max_exponent",
            "min_exponent", "max", "min_normal", "min_subnormal", "epsilon", "has_inf", "nan", "negative_zero",
            "subnormals", "signed"}
    for name, dt in ML.items():
        f, fi = by_name[name], ml_dtypes.finfo(dt)
        assert set(f) == keys
        assert f["max"] == float(fi.max) and f["min_normal"] == float(fi.smallest_normal)
        assert f["epsilon"] == float(fi.eps) and f["min_subnormal"] == float(fi.smallest_subnormal)
        assert f["mantissa_bits"] == fi.nmant and f["total_bits"] == fi.bits
    assert mantissa.format_info("e3m3:bias=4")["bias"] == 4


def test_output_arrays_are_written_in_place():
    x = np.linspace(-3, 3, 1000, dtype=np.float32)
    out = np.empty_like(x)
    assert mantissa.quantize(x, "e4m3fn", out=out) is out
    assert same(out, x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32))
    mantissa.quantize(out, "bf16", out=out)  # in place
    codes = np.empty(x.shape, np.uint8)
    assert mantissa.encode(x, "e5m2", out=codes) is codes
    assert np.array_equal(codes, mantissa.from_ml_dtypes(x.astype(ml_dtypes.float8_e5m2)))
    f8 = np.zeros(x.shape, ml_dtypes.float8_e5m2)  # an ml_dtypes array receives the codes directly
    assert mantissa.encode(x, "e5m2", out=f8) is f8
    assert np.array_equal(f8.astype(np.float32), x.astype(ml_dtypes.float8_e5m2).astype(np.float32))


@pytest.mark.parametrize("fmt,dt", [("bf16", ml_dtypes.bfloat16), ("fp16", np.float16), ("tf32", None),
                                    ("e4m3fn", ml_dtypes.float8_e4m3fn)])
def test_repeated_calls_allocate_the_same_results(fmt, dt):
    # Two calls give the same codes, shape and dtype, and the dtype the format's storage bytes.
    x = np.random.default_rng(3).standard_normal((3, 5, 7), dtype=np.float32)
    x.setflags(write=False)  # inputs are only read
    first, second = mantissa.encode(x, fmt), mantissa.encode(x, fmt)
    assert first.dtype == second.dtype and first.shape == second.shape == x.shape
    assert np.array_equal(first, second)
    want_bytes = mantissa.format_info(fmt)["storage_bytes"]
    assert first.dtype == {1: np.uint8, 2: np.uint16, 4: np.uint32}[want_bytes]
    q = mantissa.quantize(x, fmt)
    assert q.dtype == np.float32 and q.shape == x.shape and q.flags.writeable
    assert np.array_equal(mantissa.decode(second, fmt), q)
    if dt is not None:
        assert np.array_equal(second, x.astype(dt).view(second.dtype))
        assert same(q, x.astype(dt).astype(np.float32))
    tiny = np.zeros((0, 4), np.float32)  # empty and 0-d arrays keep their shapes
    assert mantissa.encode(tiny, fmt).shape == (0, 4) and mantissa.quantize(np.float32(1.5).reshape(()), fmt).shape == ()


def test_calls_that_change_format_rounding_and_seed_between_them():
    # The direct numpy path keeps the last format, rounding and kernel plan it saw;
    # every call below changes one of them (or passes an equal string built at run
    # time) and is checked against gfloat with the call's own draws.
    x = grid_values("e4m3fn", seed=5)
    x = x[np.isfinite(x) & (np.abs(x) <= 448)]

    def ref(fmt, mode, seed=0):
        if mode == "stochastic":
            draws = mantissa._core.stochastic_bits(seed, x.size, 16).astype(np.int64)
            r = gfloat.round_ndarray(GF[fmt], x.astype(np.float64), gfloat.RoundMode.StochasticFastest, True, draws, 16)
        else:
            r = gfloat.round_ndarray(GF[fmt], x.astype(np.float64), MODES[mode], True)
        return r.astype(np.float32)

    calls = [("e4m3fn", "nearest-even", 0), ("e5m2", "nearest-even", 0), ("".join(["e4m3", "fn"]), "up", 0),
             ("e4m3fn", "stochastic", 1), ("e4m3fn", "stochastic", 2), ("e4m3fn", "stochastic", 1),
             ("e4m3fn", "-".join(["toward", "zero"]), 0), ("bf16", "down", 0), ("e4m3fn", "nearest-even", 0)]
    for fmt, mode, seed in calls:
        got = mantissa.quantize(x, fmt, mode, saturate=True, seed=seed)
        assert same(got, ref(fmt, mode, seed)), (fmt, mode, seed)
        codes = mantissa.encode(x, fmt, mode, saturate=True, seed=seed)
        assert same(mantissa.decode(codes, fmt), got), (fmt, mode, seed)


def test_numpy_arrays_the_direct_path_does_not_take():
    # Byte-swapped, ndarray subclasses, misaligned: taken by the general (DLPack)
    # path or refused with a message, never misread.
    x = np.linspace(-500, 500, 4099, dtype=np.float32)
    want = x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    with np.errstate(over="ignore"):
        want_sat = np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert same(mantissa.quantize(x, "e4m3fn", saturate=True), want_sat)

    class Sub(np.ndarray):
        pass

    assert same(mantissa.quantize(x.view(Sub), "e4m3fn"), want)
    buf = np.zeros(x.nbytes + 1, np.uint8)
    odd = buf[1:].view(np.float32)  # not 4-byte aligned
    odd[:] = x
    try:
        assert same(mantissa.quantize(odd, "e4m3fn"), want)
    except (TypeError, ValueError, BufferError):
        pass  # refusing an unaligned array is fine; misreading it is not
    swapped = x.astype(x.dtype.newbyteorder("S"))
    with pytest.raises(TypeError, match="x: expected values in the machine's byte order"):
        mantissa.quantize(swapped, "e4m3fn")
    with pytest.raises(TypeError, match="out: expected values in the machine's byte order"):
        mantissa.encode(x, "bf16", out=np.empty(x.shape, np.dtype(np.uint16).newbyteorder("S")))
    with pytest.raises(TypeError):
        mantissa.quantize(x, 4)
    with pytest.raises(TypeError):
        mantissa.encode(x, "e4m3fn", None)
    # Above the GIL-release and threading thresholds, written into out= and returned.
    big = np.random.default_rng(1).standard_normal(1 << 17).astype(np.float32)
    out = np.empty_like(big)
    assert mantissa.quantize(big, "e5m2", out=out) is out
    assert same(out, big.astype(ml_dtypes.float8_e5m2).astype(np.float32))


def test_the_benchmarks_memcpy_copies_every_byte():
    x = np.random.default_rng(2).integers(0, 255, (1 << 17) + 37, dtype=np.uint8)  # chunks of uneven length
    y = np.zeros_like(x)
    mantissa._core.memcpy(x, y)
    assert np.array_equal(x, y)
    with pytest.raises(ValueError, match="same byte size"):
        mantissa._core.memcpy(x, y[1:])


def test_bad_inputs_raise_python_errors():
    x = np.ones(16, np.float32)
    with pytest.raises(ValueError, match="format: .*e4m3fn"):  # names the valid presets
        mantissa.quantize(x, "e4m3xx")
    with pytest.raises(ValueError, match="round: "):
        mantissa.quantize(x, "e4m3fn", "sideways")
    with pytest.raises(ValueError, match="random_bits"):
        mantissa.quantize(x, "e4m3fn", "stochastic", random_bits=0)
    with pytest.raises(TypeError, match="float32"):
        mantissa.quantize(np.ones(16), "e4m3fn")
    with pytest.raises(TypeError, match="float32"):
        mantissa.quantize(np.ones(16, np.int32), "e4m3fn")
    with pytest.raises(ValueError, match="C-contiguous"):
        mantissa.quantize(np.ones((8, 8), np.float32)[:, ::2], "e4m3fn")
    with pytest.raises(ValueError, match="C-contiguous"):
        mantissa.encode(np.ones((8, 8), np.float32).T, "e4m3fn")
    ro = np.ones(16, np.float32)
    ro.flags.writeable = False
    assert same(mantissa.quantize(ro, "e4m3fn"), ro)  # read-only input is fine
    with pytest.raises(ValueError, match="read-only"):
        mantissa.quantize(x, "e4m3fn", out=ro)
    with pytest.raises(TypeError, match="out: expected float32"):
        mantissa.quantize(x, "e4m3fn", out=np.empty(16, np.float64))
    with pytest.raises(ValueError, match="wrong shape"):
        mantissa.quantize(x, "e4m3fn", out=np.empty(15, np.float32))
    with pytest.raises(ValueError, match="255 is not a e2m1fn code"):  # no masking of bytes beyond 4 bits
        mantissa.decode(np.array([1, 255], np.uint8), "e2m1fn")
    with pytest.raises(ValueError, match="64 is not a e3m2fn code"):
        mantissa.mx_dequantize(np.full((1, 32), 64, np.uint8), np.full((1, 1), 127, np.uint8), "mxfp6_e3m2")
    with pytest.raises(TypeError, match="16-bit integer codes"):
        mantissa.decode(np.zeros(4, np.uint8), "bf16")
    with pytest.raises(ValueError, match="format: "):
        mantissa.mx_quantize(x, "mxfp9")
    with pytest.raises(ValueError, match="block"):
        mantissa.mx_quantize(x, "mxfp8_e4m3", block=0)
    with pytest.raises(ValueError, match="axis"):
        mantissa.mx_quantize(x, "mxfp8_e4m3", axis=2)
    with pytest.raises(ValueError, match="ml_dtypes has no dtype"):
        mantissa.as_ml_dtypes(np.zeros(4, np.uint8), "int8")
    with pytest.raises(ValueError, match="threads"):
        mantissa.set_num_threads(0)
    # Empty and 0-d arrays are fine.
    assert mantissa.quantize(np.zeros(0, np.float32), "e4m3fn").shape == (0,)
    assert mantissa.quantize(np.float32(3.3).reshape(()), "e4m3fn") == np.float32(3.25)


def test_formats_equal_the_cli_json():
    cli = os.environ.get("MANTISSA_CLI")
    if not cli:
        pytest.skip("MANTISSA_CLI (the mantissa binary) not set: scripts/test.sh sets it")
    ref = json.loads(subprocess.run([cli, "formats", "--json"], check=True, capture_output=True, text=True).stdout)
    assert mantissa.formats() == ref
    user = json.loads(subprocess.run([cli, "formats", "--json", "--format", "e3m3:bias=4:nan=none"], check=True,
                                     capture_output=True, text=True).stdout)
    assert [mantissa.format_info("e3m3:bias=4:nan=none")] == user
