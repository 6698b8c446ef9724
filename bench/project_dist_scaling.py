#!/usr/bin/env python3
"""Projects data-parallel step time to 8, 64 and 512 ranks from the files
bench/run_dist_scaling.sh writes (dist_scaling.json, dist_codec.json), over
25, 100 and 400 Gb/s links.

Model (weak scaling: every rank keeps the measured per-rank batch; no overlap of
communication with compute):
  compute = the 2-rank fp32 run's step time minus its communication time; also shown
            100x faster (an accelerator-class rank), where the wire starts to matter
  codec   = per step, per rank, with S values in the flat gradient (bench_dist_codec,
            cpu time per value, one thread):
              encode S (1 + 1/N)  [every chunk, then the owned sum]
              decode 2 S          [N received pieces of the owned chunk, the gathered S]
              error feedback: + decode S (1 + 1/N)
  wire    = B bytes (the gradient in the format) through reduce-scatter + all-gather,
            the better of  ring: 2 (N-1) alpha + 2 (N-1)/N B / beta
                           tree: 2 ceil(log2 N) alpha + 2 B / beta
            alpha = 5 us per message, beta = link rate / 8 bytes per second
  efficiency = compute / (compute + codec + wire)
Usage: python3 bench/project_dist_scaling.py DIR
"""
import json, math, sys

d = sys.argv[1]
runs = {r["key"]: r for r in json.load(open(f"{d}/dist_scaling.json"))}
codec = {}
for b in json.load(open(f"{d}/dist_codec.json"))["benchmarks"]:
    kind = "enc" if b["name"].startswith("BM_encode") else "dec"
    codec[(kind, b["label"])] = b["cpu_time"] * {"ms": 1e-3, "us": 1e-6, "ns": 1e-9}[b["time_unit"]] / 3_260_416
ALPHA, LINKS, RANKS = 5e-6, [25, 100, 400], [8, 64, 512]
fp32 = runs["r2t1_fp32"]
S = fp32["comm_bytes"] / 4  # 2 ranks send half the gradient in each of 2 collectives: B = S x 4 bytes
measured = (fp32["step_ms"] - fp32["comm_ms"]) / 1e3
formats = [("fp32", "fp32", 4.0, False), ("bf16", "bf16", 2.0, False), ("fp8 + EF", "fp8-e4m3", 1 + 1 / 128, True)]
print(f"Gradient: {S / 1e6:.2f} M values. Cells: step ms (efficiency).\n")
for title, compute in [(f"measured compute {1e3 * measured:.0f} ms per step", measured),
                       (f"compute 100x faster ({10 * measured:.1f} ms per step)", measured / 100)]:
    print(f"{title}:\n")
    print("| wire | link | MB per step | codec ms (N=8) | " + " | ".join(f"{n} ranks" for n in RANKS) + " |")
    print("|---|---|---:|---:|" + "---:|" * len(RANKS))
    for label, name, bytes_per, ef in formats:
        B = S * bytes_per
        for g in LINKS:
            beta = g * 1e9 / 8
            cells, c8 = [], 0
            for n in RANKS:
                c = codec[("enc", name)] * S * (1 + 1 / n) + codec[("dec", name)] * S * (2 + (1 + 1 / n if ef else 0))
                c8 = c8 or c
                ring = 2 * (n - 1) * ALPHA + 2 * (n - 1) / n * B / beta
                tree = 2 * math.ceil(math.log2(n)) * ALPHA + 2 * B / beta
                t = compute + c + min(ring, tree)
                cells.append(f"{1e3 * t:.1f} ({100 * compute / t:.0f}%)")
            print(f"| {label} | {g} Gb/s | {B / 1e6:.2f} | {1e3 * c8:.1f} | " + " | ".join(cells) + " |")
    print()
