"""mantissa's array casts from Python against ml_dtypes' astype, in the same run.

    bash scripts/pyrun.sh bench/python_formats.py [--n-log2 26] [--reps 3] [--threads N] [--small-only]

Rows: encode (fp32 -> codes) and quantize (fp32 -> fp32 on the format's grid)
at 2^n values against ml_dtypes' cast (the faster of `x.astype(dtype)` and
`np.copyto` into a preallocated array; and back to float32 for quantize);
MXFP8 (32-value blocks, E8M0 scales) against the same quantiser written with
numpy + ml_dtypes. mantissa writes into preallocated `out=` arrays and is
timed on one thread and on its threads (--threads N, default its own).
Beside each row, the memory floor: the row's bytes (fp32 in, result out) at
the bandwidth of a memcpy (the faster of np.copyto and a copy on mantissa's
threads), and the largest ratio over ml_dtypes that floor allows on this
host. Then the time of one call on a 1 Ki array against numpy ufunc calls on
it, allocating (np.negative(x)) and with out= (best of 100 x --reps rounds of
1000 calls; --small-only: just these). Best of --reps; ml_dtypes and numpy
run on one thread.
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
    copy_times = memcpy_times(x, a.reps)  # before and after the rows: the load on the host changes
    rows = large_rows(x, a.reps) + torchao_rows(x, a.reps)
    floor_rows(x, rows, [min(t) for t in zip(copy_times, memcpy_times(x, a.reps))])
    per_call_rows(x, a.reps)


def large_rows(x, reps):
    """(case, ml_dtypes s, mantissa 1-thread s, mantissa s, bytes moved) for every large cast."""
    n, threads = x.size, mantissa.num_threads()

    def both(fn):  # mantissa on one thread, then on its threads
        mantissa.set_num_threads(1)
        one = best(fn, reps)
        mantissa.set_num_threads(threads)
        return one, best(fn, reps)

    rows = []
    for fmt, dt in [("bf16", ml_dtypes.bfloat16), ("fp16", np.float16), ("e4m3fn", ml_dtypes.float8_e4m3fn),
                    ("e5m2", ml_dtypes.float8_e5m2)]:
        b = np.dtype(dt).itemsize
        codes, out = np.empty(n, np.uint16 if b == 2 else np.uint8), np.empty_like(x)
        cast, back = np.empty(n, dt), np.empty_like(x)
        # ml_dtypes' cast into a preallocated array (no page faults), or astype if that is faster
        ref = min(best(lambda: np.copyto(cast, x, casting="unsafe"), reps), best(lambda: x.astype(dt), reps))
        rows.append((f"encode {fmt}", ref, *both(lambda: mantissa.encode(x, fmt, out=codes)), (4 + b) * n))
        assert np.array_equal(codes, x.astype(dt).view(codes.dtype))  # same codes

        def ml_quantize():
            np.copyto(cast, x, casting="unsafe")
            np.copyto(back, cast)

        ref = min(best(ml_quantize, reps), best(lambda: x.astype(dt).astype(np.float32), reps))
        rows.append((f"quantize {fmt}", ref, *both(lambda: mantissa.quantize(x, fmt, out=out)), 8 * n))
    ref = best(lambda: numpy_mx(x), reps)
    mx_out = (np.empty(n, np.uint8), np.empty(n // 32, np.uint8))  # into preallocated arrays, as the rows above
    rows.append(("mx_quantize mxfp8_e4m3", ref, *both(lambda: mantissa.mx_quantize(x, "mxfp8_e4m3", out=mx_out)),
                 4 * n + n + n // 32))
    c_ref, s_ref = numpy_mx(x)
    c, s = mantissa.mx_quantize(x, "mxfp8_e4m3")
    assert np.array_equal(c, c_ref.view(np.uint8).reshape(-1)) and np.array_equal(s, s_ref)
    return rows


def torchao_rows(x, reps):
    """MX and NVFP4 against torchao's quantisers on the CPU (PyTorch 2.x with torchao), if importable."""
    threads = mantissa.num_threads()  # importing a torch that shares mantissa's OpenMP runtime resets it
    try:
        import torch
        from torchao.prototype.mx_formats.config import ScaleCalculationMode
        from torchao.prototype.mx_formats.mx_tensor import to_mx
        from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale
    except Exception as e:  # noqa: BLE001 (any import failure means: no torchao rows)
        print(f"# torchao rows skipped: {type(e).__name__}: {e} (bash bench/torch_venv.sh installs PyTorch 2.x "
              "and torchao)")
        return []
    finally:
        mantissa.set_num_threads(threads)
    import torchao

    torch.set_num_threads(threads)
    print(f"# torchao {torchao.__version__} on PyTorch {torch.__version__}, {torch.get_num_threads()} threads")
    n = x.size
    x2 = x.reshape(-1, 4096)
    xt = torch.from_numpy(x2)

    def both(fn):
        mantissa.set_num_threads(1)
        one = best(fn, reps)
        mantissa.set_num_threads(threads)
        return one, best(fn, reps)

    rows = []
    for dt, preset in [(torch.float8_e4m3fn, "mxfp8_e4m3"), (torch.float4_e2m1fn_x2, "mxfp4")]:
        ref = best(lambda: to_mx(xt, dt, 32, ScaleCalculationMode.FLOOR), reps)
        out_bytes = n if preset != "mxfp4" else n // 2  # torchao packs FP4; mantissa keeps a code a byte
        rows.append((f"torchao {preset}", ref, *both(lambda: mantissa.mx_quantize(x2, preset)),
                     4 * n + out_bytes + n // 32))
        s_ref, d_ref = to_mx(xt, dt, 32, ScaleCalculationMode.FLOOR)
        c, s = mantissa.mx_quantize(x2, preset)
        assert np.array_equal(s, s_ref.view(torch.uint8).numpy())  # same scales (codes: tests/python/test_torchao.py)

    def ao_nvfp4():
        nvfp4_quantize(xt, 16, per_tensor_amax_to_scale(torch.amax(torch.abs(xt))))

    ref = best(ao_nvfp4, reps)
    rows.append(("torchao nvfp4 (packed)", ref, *both(lambda: mantissa.nvfp4_quantize(x2, packed=True)),
                 4 * n + n // 2 + n // 16))
    return rows


def memcpy_times(x, reps):
    """(np.copyto, a copy on mantissa's threads) of x, seconds."""
    copy = np.empty_like(x)
    return best(lambda: np.copyto(copy, x), reps), best(lambda: mantissa._core.memcpy(x, copy), reps)


def floor_rows(x, rows, copy_times):
    """The rows with the memory floor: bytes moved at memcpy's bandwidth, and the largest ratio it allows."""
    t_np, t_mc = copy_times
    bw = 2 * x.nbytes / min(t_np, t_mc)  # bytes read + written per second
    print(f"# memcpy of {x.nbytes >> 20} MiB (best before and after the rows): np.copyto {t_np * 1e3:.1f} ms, on mantissa's "
          f"{mantissa.num_threads()} threads {t_mc * 1e3:.1f} ms: {bw / 1e9:.1f} GB/s read + written")
    print("# ref: ml_dtypes (numpy + ml_dtypes for MX), or torchao; floor ms: the row's bytes (fp32 in + result "
          "out) at that bandwidth; max x: ref / floor, the largest ratio any cast can reach here; ref %: the "
          "reference's speed as a share of memcpy's")
    print(f"# ratio: ref / mantissa on its {mantissa.num_threads()} threads; 1t: on one thread")
    print(f"{'case':24s} {'ref ms':>9s} {'mantissa 1t':>11s} {'mantissa ms':>11s} {'ratio':>7s} {'1t':>7s} "
          f"{'floor ms':>8s} {'max x':>6s} {'ref %':>5s}")
    for name, ref, one, got, nbytes in rows:
        floor = nbytes / bw
        print(f"{name:24s} {ref * 1e3:9.2f} {one * 1e3:11.2f} {got * 1e3:11.2f} {ref / got:6.1f}x {ref / one:6.1f}x "
              f"{floor * 1e3:8.2f} {ref / floor:5.1f}x {100 * floor / ref:4.0f}%")


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
