"""The Python package's entry points under atheris (libFuzzer for Python).

Each input picks an entry point (quantize, encode, decode, the MX, NVFP4 and
MXFP4 casts and their inverses, rht, format_info, recipe) and draws its
arguments: a format spec (a preset, a user-defined one or bytes), arrays of
any small shape and dtype, C-ordered or not, read-only or not, outputs that
are separate, the input itself, or views overlapping it, and integers from
the edges of their ranges (-1, 2^31, 2^63, 2^64-1). The only accepted outcome
of a bad call is ValueError, TypeError or (a bad format or recipe name)
KeyError from the package; any other exception, a crash or a sanitizer report
is a finding. A good call's result is checked too: finite inputs cast to a
format without NaN (the package's format_info says "nan": "none") never
come back NaN.

  python fuzz/python/fuzz_python.py [libFuzzer flags, e.g. -max_total_time=60 -seed=1]
"""
import sys

import atheris

with atheris.instrument_imports():
    import numpy as np
    import mantissa

ACCEPTED = (ValueError, TypeError, KeyError)
SPECS = ["bf16", "fp16", "e4m3fn", "e5m2", "e4m3fnuz", "e2m1fn", "e3m2fn", "e2m3fn", "e8m0", "e4m3",
         "e5m10", "e3m4:bias=3", "e11m52", "e0m1", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp4_e2m1"]
ROUNDS = ["nearest-even", "stochastic", "toward-zero", "nearest-away", "up", "down", "bogus"]
EDGES = [0, 1, -1, 2, 7, 16, 31, 32, 33, 2**31 - 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64]
DTYPES = [np.float32, np.float64, np.float16, np.uint8, np.uint16, np.int32, np.int8]


def integer(fdp):
    return EDGES[fdp.ConsumeIntInRange(0, len(EDGES) - 1)] if fdp.ConsumeBool() else fdp.ConsumeIntInRange(-4, 70)


def spec(fdp):
    if fdp.ConsumeIntInRange(0, 7) == 0:
        return fdp.ConsumeUnicodeNoSurrogates(12)
    return SPECS[fdp.ConsumeIntInRange(0, len(SPECS) - 1)]


def array(fdp, dtype=None):
    shape = tuple(fdp.ConsumeIntInRange(0, 9) for _ in range(fdp.ConsumeIntInRange(0, 3)))
    dtype = dtype or DTYPES[fdp.ConsumeIntInRange(0, len(DTYPES) - 1)]
    n = int(np.prod(shape)) if shape else 1
    raw = fdp.ConsumeBytes(n * np.dtype(dtype).itemsize)
    raw += b"\0" * (n * np.dtype(dtype).itemsize - len(raw))
    a = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    if a.ndim >= 2 and fdp.ConsumeBool():
        a = a.T  # not C-ordered
    if fdp.ConsumeIntInRange(0, 5) == 0:
        a.flags.writeable = False
    return a


def axis(fdp):
    return -1 if fdp.ConsumeBool() else fdp.ConsumeIntInRange(-3, 3)


def fp4_block(fdp, nvfp4):
    """Mostly the scheme's own tiles, sometimes the other scheme's or nonsense."""
    own = ["1x16", "16x16"] if nvfp4 else ["1x32", "32x32"]
    pick = fdp.ConsumeIntInRange(0, 7)
    return own[pick % 2] if pick < 6 else ["1x0", "x", "1x16", "32x32"][fdp.ConsumeIntInRange(0, 3)]


def output(fdp, x, dtype):
    """None, x itself, a view overlapping x, or a separate array (maybe wrong)."""
    kind = fdp.ConsumeIntInRange(0, 4)
    if kind == 0 or x.size == 0:
        return None
    if kind == 1:
        return x
    if kind == 2:
        flat = x.reshape(-1) if x.flags.c_contiguous else np.ascontiguousarray(x).reshape(-1)
        return flat.view(np.uint8)[: max(0, flat.nbytes - fdp.ConsumeIntInRange(0, 8))]
    out = np.zeros(x.shape if fdp.ConsumeBool() else (x.size + fdp.ConsumeIntInRange(-2, 2),), dtype=dtype)
    if fdp.ConsumeIntInRange(0, 4) == 0:
        out.flags.writeable = False
    return out


def call(fdp):
    which = fdp.ConsumeIntInRange(0, 10)
    if which == 0:
        x = array(fdp, np.float32 if fdp.ConsumeBool() else None)
        fmt = spec(fdp)
        y = mantissa.quantize(x, fmt, ROUNDS[fdp.ConsumeIntInRange(0, 6)], saturate=fdp.ConsumeBool(),
                              flush_subnormals=fdp.ConsumeBool(), seed=integer(fdp), random_bits=integer(fdp),
                              out=output(fdp, x, np.float32))
        check_finite(x, fmt, y)
    elif which == 1:
        x = array(fdp, np.float32)
        mantissa.encode(x, spec(fdp), ROUNDS[fdp.ConsumeIntInRange(0, 6)], saturate=fdp.ConsumeBool(),
                        seed=integer(fdp), packed=fdp.ConsumeBool(), out=output(fdp, x, np.uint8))
    elif which == 2:
        c = array(fdp, np.uint8 if fdp.ConsumeBool() else None)
        mantissa.decode(c, spec(fdp), packed=fdp.ConsumeBool(), count=integer(fdp) if fdp.ConsumeBool() else None,
                        out=output(fdp, c, np.float32))
    elif which == 3:
        x = array(fdp, np.float32)
        out = None
        if fdp.ConsumeBool() and x.size:
            buf = np.zeros(x.shape, np.uint8)
            out = (buf, buf) if fdp.ConsumeBool() else (buf, np.zeros(max(1, x.size // 32), np.uint8))
        mantissa.mx_quantize(x, spec(fdp), block=integer(fdp), axis=axis(fdp),
                             scale_rounding=["floor", "ceil", "even", "x"][fdp.ConsumeIntInRange(0, 3)], out=out)
    elif which == 4:
        mantissa.mx_dequantize(array(fdp), array(fdp), spec(fdp), block=integer(fdp), axis=axis(fdp))
    elif which in (5, 6):
        q = mantissa.nvfp4_quantize if which == 5 else mantissa.mxfp4_quantize
        q(array(fdp, np.float32), block=fp4_block(fdp, which == 5), axis=axis(fdp),
          round=ROUNDS[fdp.ConsumeIntInRange(0, 6)], seed=integer(fdp), packed=fdp.ConsumeBool())
    elif which in (7, 8):
        d = mantissa.nvfp4_dequantize if which == 7 else mantissa.mxfp4_dequantize
        d(array(fdp), array(fdp), fdp.ConsumeFloat(), block=fp4_block(fdp, which == 7), axis=axis(fdp),
          packed=fdp.ConsumeBool(), count=integer(fdp) if fdp.ConsumeBool() else None)
    elif which == 9:
        mantissa.rht(array(fdp), axis=axis(fdp), seed=integer(fdp), random=fdp.ConsumeBool())
    else:
        if fdp.ConsumeBool():
            mantissa.format_info(spec(fdp))
        else:
            mantissa.recipe(["fp32", "bf16-amp", "fp8-delayed", "nvfp4", "x"][fdp.ConsumeIntInRange(0, 4)],
                            set=[fdp.ConsumeUnicodeNoSurrogates(24) for _ in range(fdp.ConsumeIntInRange(0, 2))])


def check_finite(x, fmt, y):
    """A format with no inf and no NaN never produces NaN from finite input."""
    if x.dtype != np.float32 or not np.isfinite(x).all():
        return
    try:
        info = mantissa.format_info(fmt)
    except ACCEPTED:
        return
    if info.get("nan") == "none" and np.isnan(np.asarray(y)).any():
        raise AssertionError(f"quantize to {fmt} turned finite values into NaN")


def test_one_input(data):
    fdp = atheris.FuzzedDataProvider(data)
    try:
        call(fdp)
    except ACCEPTED:
        pass


if __name__ == "__main__":
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
