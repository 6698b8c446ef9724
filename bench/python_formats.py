"""mantissa's array casts from Python against ml_dtypes' astype, in the same run.

    bash scripts/pyrun.sh bench/python_formats.py [--n-log2 26] [--reps 3] [--threads N] [--small-only]

Rows: encode (fp32 -> codes) and quantize (fp32 -> fp32 on the format's grid)
at 2^n values against ml_dtypes `x.astype(dtype)` (and `.astype(float32)` back
for quantize); MXFP8 (32-value blocks, E8M0 scales) against the same
quantiser written with numpy + ml_dtypes; and the time of one call on a 1 Ki
array against numpy ufunc calls on it, allocating (np.negative(x)) and with
out= (best of 100 x --reps rounds of 1000 calls; --small-only: just these);
np.copyto of the input bounds what any cast can reach. Best of --reps; ml_dtypes
and numpy run on one thread, mantissa on --threads (default: its own default).
"""

import argparse
import os
import platform
import re
import time
import timeit

import ml_dtypes
import numpy as np

import mantissa


def best(fn, reps):
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def numpy_mx(x, block=32):
    """OCP MXFP8 (e4m3fn, floor scales) with numpy and ml_dtypes: codes and E8M0 scales."""
    b = x.reshape(-1, block)
    amax = np.abs(b).max(axis=1)
    e = np.floor(np.log2(np.where(amax > 0, amax, 1))).astype(np.int32) - 8
    e = np.where(amax > 0, np.clip(e, -127, 127), -127)
    scaled = np.clip(b * np.ldexp(np.float32(1), -e)[:, None], -448, 448)
    return scaled.astype(ml_dtypes.float8_e4m3fn), (e + 127).astype(np.uint8)


def isa():
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return platform.machine()
    found = sorted(set(re.findall(r"\b(avx512[a-z_0-9]*|amx[a-z_0-9]*)\b", flags)))
    return " ".join(found) or platform.machine()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-log2", type=int, default=26)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--small-only", action="store_true", help="only the per-call overhead on 1 Ki values")
    a = ap.parse_args()
    if a.threads:
        mantissa.set_num_threads(a.threads)
    n = 1 << a.n_log2
    x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
    print(f"# {n} values; mantissa threads {mantissa.num_threads()} ({os.cpu_count()} cpus), kernels "
          f"{mantissa._core.active_isa()}; CPU flags: {isa()}")
    print("# the machine may be loaded by other work: ratios are from the same run, absolute times are not stable")
    if a.small_only:
        per_call_rows(x, a.reps)
        return
    print(f"{'case':28s} {'ml_dtypes ms':>13s} {'mantissa ms':>12s} {'ratio':>7s}")
    rows = []
    for fmt, dt in [("bf16", ml_dtypes.bfloat16), ("fp16", np.float16), ("e4m3fn", ml_dtypes.float8_e4m3fn),
                    ("e5m2", ml_dtypes.float8_e5m2)]:
        codes = np.empty(n, np.uint16 if np.dtype(dt).itemsize == 2 else np.uint8)
        out = np.empty_like(x)
        ref = best(lambda: x.astype(dt), a.reps)
        got = best(lambda: mantissa.encode(x, fmt, out=codes), a.reps)
        rows.append((f"encode {fmt}", ref, got))
        ref = best(lambda: x.astype(dt).astype(np.float32), a.reps)
        got = best(lambda: mantissa.quantize(x, fmt, out=out), a.reps)
        rows.append((f"quantize {fmt}", ref, got))
        assert np.array_equal(codes, x.astype(dt).view(codes.dtype))  # same codes
    ref = best(lambda: numpy_mx(x), a.reps)
    got = best(lambda: mantissa.mx_quantize(x, "mxfp8_e4m3"), a.reps)
    rows.append(("mx_quantize mxfp8_e4m3", ref, got))
    c_ref, s_ref = numpy_mx(x)
    c, s = mantissa.mx_quantize(x, "mxfp8_e4m3")
    assert np.array_equal(c, c_ref.view(np.uint8).reshape(-1)) and np.array_equal(s, s_ref)
    for name, ref, got in rows:
        print(f"{name:28s} {ref * 1e3:13.1f} {got * 1e3:12.1f} {ref / got:6.1f}x")
    # The memory floor: a cast moving 6 bytes a value (fp32 in, 2-byte codes out)
    # or 8 (fp32 in and out) cannot beat a copy of x scaled to those bytes.
    copy = np.empty_like(x)
    t_copy = best(lambda: np.copyto(copy, x), a.reps)
    ref = dict((name, r) for name, r, _ in rows)
    print(f"# memory floor: np.copyto of x {t_copy * 1e3:.1f} ms, so at most "
          f"{ref['encode bf16'] / (0.75 * t_copy):.1f}x for encode bf16 and "
          f"{ref['quantize bf16'] / t_copy:.1f}x for quantize bf16 over ml_dtypes")
    per_call_rows(x, a.reps)


def per_call_rows(x, reps):
    """One call on 1 Ki values against numpy ufunc calls on the same array, allocating and with out=."""
    small = x[:1024].copy()
    out, codes = np.empty_like(small), np.empty(small.shape, np.uint8)

    def per_call(fn):  # many short rounds: on a loaded machine some run without being preempted
        calls = 1000
        return min(timeit.repeat(fn, number=calls, repeat=100 * reps)) / calls

    t = {
        "np.negative(x)": per_call(lambda: np.negative(small)),
        "np.negative(x, out=y)": per_call(lambda: np.negative(small, out=out)),
        "np.add(x, x, out=y)": per_call(lambda: np.add(small, small, out=out)),
        "ml_dtypes astype e4m3fn": per_call(lambda: small.astype(ml_dtypes.float8_e4m3fn)),
        "quantize e4m3fn": per_call(lambda: mantissa.quantize(small, "e4m3fn")),
        "quantize e4m3fn out=": per_call(lambda: mantissa.quantize(small, "e4m3fn", out=out)),
        "encode e4m3fn": per_call(lambda: mantissa.encode(small, "e4m3fn")),
        "encode e4m3fn out=": per_call(lambda: mantissa.encode(small, "e4m3fn", out=codes)),
    }
    print("# one call on 1 Ki float32 values, us (best of many rounds of 1000 calls); ratio to the numpy ufunc "
          "call of the same kind (allocating: np.negative(x); out=: np.negative(x, out=y))")
    for name, v in t.items():
        ref = t["np.negative(x, out=y)"] if name.endswith("out=") else t["np.negative(x)"]
        ratio = f"{v / ref:6.2f}x" if name.startswith(("quantize", "encode")) else ""
        print(f"  {name:28s} {v * 1e6:7.3f} {ratio}")


if __name__ == "__main__":
    main()
