"""Oracle: mantissa's NVFP4 / MXFP4 block casts against an independent numpy
implementation of the block rules with ml_dtypes' float8_e4m3fn,
float8_e8m0fnu and float4_e2m1fn as the element and scale encoders.

torchao's reference quantisers (torchao.prototype.mx_formats) import torch,
whose PyPI wheel is several GB with its CUDA libraries, so they are not used;
the rules below follow torchao's nvfp4_quantize order of operations:
  t = amax / (6 * 448)  (floored at 2^-117, see formats/fp4.hpp)
  s = e4m3(clip((amax_b / 6) / t, 2^-9, 448)),  q = e2m1(clip(x / (t * s), -6, 6))
and OCP MX for MXFP4: e = floor(log2 amax_b) - 2, q = e2m1(clip(x * 2^-e, -6, 6)).
Nearest-even rounding only (ml_dtypes has no stochastic casts).

Inputs: heavy-tailed random tensors over many magnitudes, zero blocks,
ties, blocks whose amax sits at the E4M3 scale's rounding boundaries.
Run: MANTISSA_BUILD_DIR=build bash scripts/pyrun.sh tests/oracles/test_fp4_blocks.py
"""

import os
import subprocess
import sys
import tempfile

import ml_dtypes as md
import numpy as np

F32 = np.float32


def blocks(x, tr, tc):
    """Yields (row slice, col slice) of each tile, row-major."""
    rows, cols = x.shape
    for i in range(0, rows, tr):
        for j in range(0, cols, tc):
            yield slice(i, min(rows, i + tr)), slice(j, min(cols, j + tc))


def e2m1(y):
    return np.clip(y, F32(-6), F32(6)).astype(md.float4_e2m1fn).astype(F32)


def expected(kind, x, tr, tc):
    dec = np.zeros_like(x)
    scales = []
    if kind == "nvfp4":
        t = max(F32(np.max(np.abs(x))) / F32(2688.0), F32(2.0 ** -117))
        t = F32(t)
        for rs, cs in blocks(x, tr, tc):
            amax_b = F32(np.max(np.abs(x[rs, cs])))
            wanted = np.clip(F32(amax_b / F32(6.0)) / t, F32(2.0 ** -9), F32(448.0)).astype(F32)
            s8 = np.array([wanted], dtype=F32).astype(md.float8_e4m3fn)
            s = s8.astype(F32)[0]
            scales.append(s8.view(np.uint8)[0])
            factor = F32(t * s)
            dec[rs, cs] = e2m1((x[rs, cs] / factor).astype(F32)) * s
        return dec, np.array(scales, dtype=np.uint8), t
    for rs, cs in blocks(x, tr, tc):
        amax_b = F32(np.max(np.abs(x[rs, cs])))
        e = -127 if amax_b == 0 else int(np.clip(np.frexp(amax_b)[1] - 1 - 2, -127, 127))
        scales.append(np.array([2.0 ** e], dtype=F32).astype(md.float8_e8m0fnu).view(np.uint8)[0])
        y = (x[rs, cs] * F32(2.0 ** -e)).astype(F32)
        dec[rs, cs] = e2m1(y) * F32(2.0 ** e)
    return dec, np.array(scales, dtype=np.uint8), F32(1.0)


def bf16_bits(v):
    return (v.astype(F32).view(np.uint32) >> 16).astype(np.uint16)


def inputs(rng):
    cases = []
    for rows, cols in [(64, 96), (37, 50)]:
        x = (rng.standard_t(2.0, size=(rows, cols)) * np.exp2(rng.integers(-12, 12, size=(rows, 1)))).astype(F32)
        x[0:2, 0:32] = 0.0  # zero blocks
        x[3, :16] = np.array([6, 5, 3.5, 2.5, 1.75, 1.25, 0.75, 0.25] * 2, dtype=F32)  # ties at scale 1
        cases.append(x)
    tiny = (rng.standard_normal((32, 32)) * F32(1e-30)).astype(F32)
    cases.append(tiny)
    return cases


def main():
    build = os.environ.get("MANTISSA_BUILD_DIR", "build")
    exe = os.path.join(build, "tests", "formats_test_fp4")
    rng = np.random.default_rng(20261126)
    failures = 0
    checked = 0
    with tempfile.TemporaryDirectory() as d:
        prefix = os.path.join(d, "case")
        for x in inputs(rng):
            for kind, b in (("nvfp4", 16), ("mxfp4", 32)):
                for tr, tc in ((1, b), (b, 1), (b, b)):
                    with open(prefix + ".spec", "w") as f:
                        f.write(f"{kind} {x.shape[0]} {x.shape[1]} {tr} {tc}\n")
                    x.tofile(prefix + ".in")
                    env = dict(os.environ, MANTISSA_FP4_ORACLE=prefix)
                    subprocess.run([exe, "--gtest_filter=Fp4.OracleDump"], env=env, check=True,
                                   stdout=subprocess.DEVNULL)
                    got = np.fromfile(prefix + ".dec", dtype=np.uint16).reshape(x.shape)
                    got_s = np.fromfile(prefix + ".scales", dtype=np.uint8)
                    got_t = np.fromfile(prefix + ".t", dtype=F32)[0]
                    want, want_s, want_t = expected(kind, x, tr, tc)
                    bad = int(np.sum(got != bf16_bits(want))) + int(np.sum(got_s != want_s)) + int(got_t != want_t)
                    checked += x.size
                    if bad:
                        failures += 1
                        print(f"MISMATCH {kind} {x.shape} tile {tr}x{tc}: {bad} differences", file=sys.stderr)
    print(f"fp4 oracle: {checked} values in {failures} failing configurations")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
