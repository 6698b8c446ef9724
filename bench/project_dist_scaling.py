#!/usr/bin/env python3
"""Projects data-parallel step time to 8, 64 and 512 ranks from a run of
bench/run_dist_scaling.sh (its dist_scaling.json), over 25, 100 and 400 Gb/s links.

Model (weak scaling: each rank keeps the measured per-rank batch):
  compute   = the 2-rank run's step time minus its communication time (per wire format)
  codec     = the measured communication time on loopback (encode, decode, the fp32
              sum and a shared-memory copy): kept whole, a conservative overhead
  wire      = the full flat gradient's S bytes in the format (= what each of 2 ranks sent)
              through a reduce-scatter and an all-gather, no overlap with compute, the better of
                ring: 2 (N - 1) alpha + 2 (N - 1) / N x S / beta
                tree: 2 ceil(log2 N) alpha + 2 S / beta     (pipelined binary trees)
  alpha     = 5 us per message, beta = link rate / 8 bytes per second
  efficiency = compute / (compute + codec + wire)
Usage: python3 bench/project_dist_scaling.py bench/results/dist_scaling.json [> table.md]
"""
import json, math, sys

res = {r["key"]: r for r in json.load(open(sys.argv[1]))}
ALPHA = 5e-6
LINKS = [25, 100, 400]
RANKS = [8, 64, 512]
print("| wire format | link | gradient MB | compute ms | codec ms | " + " | ".join(f"{n} ranks" for n in RANKS) + " |")
print("|---|---|---:|---:|---:|" + "---:|" * len(RANKS))
for key, label in [("r2t1_fp32", "fp32"), ("r2t1_bf16", "bf16"), ("r2t1_fp8", "fp8 + EF")]:
    r = res[key]
    full = r["comm_bytes"]  # 2 ranks: each sends half of S in each of the 2 collectives
    compute = (r["step_ms"] - r["comm_ms"]) / 1e3
    codec = r["comm_ms"] / 1e3
    for g in LINKS:
        beta = g * 1e9 / 8
        cells = []
        for n in RANKS:
            ring = 2 * (n - 1) * ALPHA + 2 * (n - 1) / n * full / beta
            tree = 2 * math.ceil(math.log2(n)) * ALPHA + 2 * full / beta
            wire = min(ring, tree)
            eff = compute / (compute + codec + wire)
            cells.append(f"{1e3 * (compute + codec + wire):.1f} ms ({100 * eff:.0f}%)")
        print(f"| {label} | {g} Gb/s | {full / 1e6:.2f} | {1e3 * compute:.1f} | {1e3 * codec:.1f} | " + " | ".join(cells) + " |")
