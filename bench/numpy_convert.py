"""The peer benchmark of bench_convert: numpy + ml_dtypes `astype` for the same
conversions (fp32 -> bf16, fp16, e4m3fn, e5m2, MXFP8 e4m3) on the same sizes,
in GB/s of fp32 input, with a numpy memcpy (np.copyto) of the same bytes.

  bash scripts/pyrun.sh bench/numpy_convert.py                # numpy side only
  bash scripts/pyrun.sh bench/numpy_convert.py --cpp build/bench/bench_convert
      # also runs the C++ benchmark and prints mantissa / numpy ratios
      # (target >= 10x) and mantissa / memcpy for 64 Mi elements (target >= 0.7)
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import ml_dtypes as md
import numpy as np

LARGE = 64 << 20
SMALL = 32 << 10


def best_seconds(fn, min_time=0.5, repeats=3):
    """Best per-call time over `repeats` rounds of at least min_time each."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        best = min(best, elapsed / calls)
    return best


def mxfp8_numpy(x):
    """MXFP8 (e4m3fn elements, 32-element blocks, E8M0 scale = floor(log2 amax) - 8)
    the way a numpy user writes it; the length is a multiple of 32 here."""
    blocks = x.reshape(-1, 32)
    amax = np.max(np.abs(blocks), axis=1, keepdims=True)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(amax)) - 8
    e = np.clip(np.where(np.isfinite(e), e, -127), -127, 127)
    codes = np.clip(blocks * np.exp2(-e).astype(np.float32), -448, 448).astype(md.float8_e4m3fn)
    scales = (e + 127).astype(np.uint8)
    return codes, scales


def conversions():
    return [
        ("bf16", lambda x: x.astype(md.bfloat16)),
        ("fp16", lambda x: x.astype(np.float16)),
        ("e4m3fn", lambda x: x.astype(md.float8_e4m3fn)),
        ("e5m2", lambda x: x.astype(md.float8_e5m2)),
        ("mxfp8_e4m3", mxfp8_numpy),
    ]


def numpy_side(sizes):
    rng = np.random.default_rng(1)
    out = {}
    for n in sizes:
        x = (rng.standard_normal(n, dtype=np.float32) * 3).astype(np.float32)
        dst = np.empty_like(x)
        min_time = 1.0 if n == LARGE else 0.3
        t = best_seconds(lambda: np.copyto(dst, x), min_time)
        out[("memcpy", n)] = x.nbytes / t / 1e9
        for name, fn in conversions():
            t = best_seconds(lambda fn=fn: fn(x), min_time)
            out[(name, n)] = x.nbytes / t / 1e9
    return out


def cpp_side(binary):
    """Runs bench_convert once; GB/s per (conversion, size) and its memcpy."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.json")
        subprocess.run([binary, f"--benchmark_out={path}", "--benchmark_out_format=json",
                        "--benchmark_min_time=0.5"], check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            runs = json.load(f)["benchmarks"]
    out = {}
    for r in runs:
        parts = r["name"].split("/")  # bm_quantize/bf16/67108864/real_time, bm_memcpy/67108864/real_time
        name = "memcpy" if parts[0] == "bm_memcpy" else parts[1]
        if parts[0] == "bm_mx_fast":
            name = "mxfp8_e4m3 (vector kernel)"
        elif parts[0] == "bm_mx":
            name = "mxfp8_e4m3 (mx_quantize)"
        n = int(parts[-2])
        out[(name, n)] = (r["bytes_per_second"] / 1e9, r["memcpy_GBps"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpp", help="path of the bench_convert binary to run and compare with")
    ap.add_argument("--small-only", action="store_true", help="skip the 64 Mi-element arrays")
    args = ap.parse_args()
    sizes = [SMALL] if args.small_only else [LARGE, SMALL]
    threads = os.environ.get("OMP_NUM_THREADS", str(os.cpu_count()))
    print(f"numpy {np.__version__}, ml_dtypes {md.__version__}; mantissa threads (OMP_NUM_THREADS) {threads}")
    cpp = cpp_side(args.cpp) if args.cpp else {}
    npy = numpy_side(sizes)
    print(f"{'conversion':27s} {'elements':>10s} {'numpy GB/s':>11s}" +
          (f" {'mantissa GB/s':>14s} {'memcpy GB/s':>12s} {'vs numpy':>9s} {'vs memcpy':>10s}" if cpp else ""))
    worst_numpy = float("inf")
    rows = ["memcpy", "bf16", "fp16", "e4m3fn", "e5m2", "mxfp8_e4m3 (mx_quantize)", "mxfp8_e4m3 (vector kernel)"]
    for n in sizes:
        for name in rows:
            base = name.split(" ")[0]
            if (base, n) not in npy:
                continue
            line = f"{name:27s} {n:10d} {npy[(base, n)]:11.3f}"
            if (name, n) in cpp:
                gbps, mc = cpp[(name, n)]
                ratio = gbps / npy[(base, n)]
                if name != "memcpy":
                    worst_numpy = min(worst_numpy, ratio)
                line += f" {gbps:14.3f} {mc:12.3f} {ratio:8.1f}x {gbps / mc:10.2f}"
            print(line)
    if cpp:
        print(f"smallest mantissa / numpy ratio over conversions: {worst_numpy:.1f}x (target >= 10x)")


if __name__ == "__main__":
    sys.exit(main())
