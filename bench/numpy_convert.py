"""The peer benchmark of bench_convert: numpy + ml_dtypes `astype` for the same
conversions (fp32 -> bf16, fp16, e4m3fn, e5m2, MXFP8 e4m3) on the same sizes,
in GB/s of fp32 input, with a numpy memcpy (np.copyto) of the same bytes.

  bash scripts/pyrun.sh bench/numpy_convert.py                # numpy side only
  OMP_WAIT_POLICY=passive bash scripts/pyrun.sh bench/numpy_convert.py \\
      --cpp build/bench/bench_convert --rounds 3 --repetitions 3
      # also runs the C++ benchmark, alternating with the numpy side round by
      # round (so both see the same machine load), and prints per conversion:
      # mantissa GB/s, numpy GB/s, mantissa / numpy (target >= 10x) and
      # mantissa / memcpy from bench_convert's own memcpy (target >= 0.7 at
      # 64 Mi elements). Ratios are formed within a round; the table gives the
      # best and the median over rounds (and over bench_convert repetitions).

The machine is shared: the load average (1 minute) is printed for each round.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import ml_dtypes as md
import numpy as np

LARGE = 64 << 20
SMALL = 32 << 10
ROWS = ["memcpy", "bf16", "fp16", "e4m3fn", "e5m2", "mxfp8_e4m3 (mx_quantize_into)", "mxfp8_e4m3 (mx_quantize)"]


def load_average():
    return os.getloadavg()[0]


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


def numpy_side(sizes, inputs):
    """GB/s of fp32 input per (conversion, size), numpy's own memcpy included."""
    out = {}
    for n in sizes:
        x = inputs[n]
        dst = np.empty_like(x)
        min_time = 1.0 if n == LARGE else 0.3
        t = best_seconds(lambda: np.copyto(dst, x), min_time)
        out[("memcpy", n)] = x.nbytes / t / 1e9
        for name, fn in conversions():
            t = best_seconds(lambda fn=fn: fn(x), min_time)
            out[(name, n)] = x.nbytes / t / 1e9
    return out


def row_name(parts):
    if parts[0] == "bm_memcpy":
        return "memcpy"
    if parts[0] == "bm_mx":
        return "mxfp8_e4m3 (mx_quantize_into)"
    if parts[0] == "bm_mx_alloc":
        return "mxfp8_e4m3 (mx_quantize)"
    return parts[1]


def cpp_side(binary, sizes, repetitions):
    """Runs bench_convert once; per (row, size) a list over repetitions of
    (GB/s, memcpy GB/s measured right after it in the same process)."""
    size_filter = "|".join(str(n) for n in sizes)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bench.json")
        subprocess.run([binary, f"--benchmark_out={path}", "--benchmark_out_format=json",
                        f"--benchmark_filter=/({size_filter})/", "--benchmark_min_time=0.5",
                        f"--benchmark_repetitions={repetitions}"], check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            runs = json.load(f)["benchmarks"]
    out = {}
    for r in runs:
        if r.get("run_type", "iteration") != "iteration":
            continue
        parts = r["name"].split("/")  # bm_quantize/bf16/67108864/real_time, bm_memcpy/67108864/real_time
        out.setdefault((row_name(parts), int(parts[-2])), []).append((r["bytes_per_second"] / 1e9, r["memcpy_GBps"]))
    return out


def spread(values):
    return max(values), statistics.median(values)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpp", help="path of the bench_convert binary to run and compare with")
    ap.add_argument("--small-only", action="store_true", help="skip the 64 Mi-element arrays")
    ap.add_argument("--large-only", action="store_true", help="skip the 32 Ki-element arrays")
    ap.add_argument("--rounds", type=int, default=1, help="alternating C++ / numpy rounds (default 1)")
    ap.add_argument("--repetitions", type=int, default=3, help="bench_convert --benchmark_repetitions (default 3)")
    ap.add_argument("--json", help="also write every measurement to this file")
    args = ap.parse_args()
    if args.rounds < 1 or args.repetitions < 1:
        ap.error("--rounds and --repetitions must be >= 1")
    if args.small_only and args.large_only:
        ap.error("--small-only and --large-only exclude each other")
    if args.cpp and not os.access(args.cpp, os.X_OK):
        ap.error(f"--cpp {args.cpp}: not an executable file")
    sizes = [SMALL] if args.small_only else [LARGE] if args.large_only else [LARGE, SMALL]
    threads = os.environ.get("OMP_NUM_THREADS", str(os.cpu_count()))
    print(f"numpy {np.__version__}, ml_dtypes {md.__version__} (one thread); mantissa threads (OMP_NUM_THREADS) "
          f"{threads}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}")
    rng = np.random.default_rng(1)
    inputs = {n: (rng.standard_normal(n, dtype=np.float32) * 3).astype(np.float32) for n in sizes}

    rounds = []  # per round: {"load": [before, after], "cpp": {...}, "numpy": {...}}
    for r in range(args.rounds):
        rec = {"load_before": load_average()}
        rec["cpp"] = cpp_side(args.cpp, sizes, args.repetitions) if args.cpp else {}
        rec["numpy"] = numpy_side(sizes, inputs)
        rec["load_after"] = load_average()
        print(f"round {r + 1}/{args.rounds}: load average {rec['load_before']:.2f} -> {rec['load_after']:.2f}",
              file=sys.stderr)
        rounds.append(rec)

    head = f"{'conversion':27s} {'elements':>10s} {'numpy GB/s':>11s}"
    if args.cpp:
        head += (f" {'mantissa GB/s':>14s} {'vs numpy best/med':>18s} {'vs memcpy best/med':>19s}")
    print(f"{len(rounds)} round(s); GB/s columns are medians over rounds (and repetitions)")
    print(head)
    worst_numpy, table = float("inf"), []
    for n in sizes:
        for name in ROWS:
            base = name.split(" ")[0]
            if (base, n) not in rounds[0]["numpy"]:
                continue
            npy = statistics.median(rec["numpy"][(base, n)] for rec in rounds)
            line = f"{name:27s} {n:10d} {npy:11.3f}"
            entry = {"conversion": name, "elements": n, "numpy_GBps": npy}
            if args.cpp and (name, n) in rounds[0]["cpp"]:
                gbps = statistics.median(g for rec in rounds for g, _ in rec["cpp"][(name, n)])
                vs_numpy = [statistics.median(g for g, _ in rec["cpp"][(name, n)]) / rec["numpy"][(base, n)]
                            for rec in rounds]
                vs_memcpy = [g / mc for rec in rounds for g, mc in rec["cpp"][(name, n)]]
                (vn_best, vn_med), (vm_best, vm_med) = spread(vs_numpy), spread(vs_memcpy)
                if name != "memcpy":
                    worst_numpy = min(worst_numpy, vn_med)
                line += f" {gbps:14.3f} {vn_best:8.1f}x/{vn_med:6.1f}x {vm_best:9.2f}/{vm_med:6.2f}"
                entry.update(mantissa_GBps=gbps, vs_numpy=vs_numpy, vs_memcpy=vs_memcpy)
            table.append(entry)
            print(line)
    if args.cpp:
        print(f"smallest median mantissa / numpy ratio over conversions: {worst_numpy:.1f}x (target >= 10x)")
    if args.json:
        meta = [{"load_before": rec["load_before"], "load_after": rec["load_after"]} for rec in rounds]
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"numpy": np.__version__, "ml_dtypes": md.__version__, "threads": threads, "rounds": meta,
                       "table": table}, f, indent=1)
        os.replace(tmp, args.json)


if __name__ == "__main__":
    sys.exit(main())
