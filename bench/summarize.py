#!/usr/bin/python3
"""Summarise one run of bench/run_all.sh: reads the raw outputs in --raw (train_*.json from
run_train_vs_torch.sh, matmul.txt from bench_matmul, convert.json from bench_convert) and writes
results.json and summary.md into --out, then prints the summary (attention.txt from bench_attention too). Every ratio compares two figures
measured in the same run; TARGETS lists the goals checked."""
import argparse
import json
import os
import platform
import re
import subprocess
import time

TARGETS = {
    "fp32_vs_torch2_compile_fp32": 1.5,      # reference GPT, PyTorch 2.x torch.compile fp32
    "best_vs_torch2_best": 1.5,              # reference GPT, best recipe vs PyTorch 2.x's best mode
    "fp32_step_fraction_of_fma_peak": 0.60,  # reference GPT, fp32 step FLOPs at the register-probe peak
    "lowp_vs_mantissa_fp32": 1.0,            # every rung: no low-precision recipe slower than fp32
    "bf16_amp_vs_mantissa_fp32_amx": 2.0,    # every rung, AMX hosts only
    "fp8_step_vs_bf16_amp_step_max": 1.15,
    "fp4_step_vs_bf16_amp_step_max": 1.25,
    "matmul_wrapper_vs_raw_max": 1.10,
    "fp32_vs_llmc_fp32": 1.5,                # GPT-2 124M at llm.c's shape, llm.c's fp32 CPU trainer
}
CATEGORIES = ["matmul", "attention", "norms", "elementwise", "embedding", "conversion", "optimizer", "overhead"]


def load(path):
    with open(path) as f:
        return json.load(f)


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def train_section(summary, reference):
    """Rows of one train_*.json: PyTorch both precisions, then every mantissa recipe; the targets
    that hold at every size, and (reference: the reference GPT) those against the peers."""
    t, m = summary["torch"], summary["mantissa"]
    recipes = m.get("recipes", {})
    size = f"L{t['layers']} C{t['d_model']} H{t['heads']} T{t['seq_len']} B{t['batch']}"
    peers = summary.get("peers") or {"debian": t}
    rows = [{"run": f"PyTorch {v['torch_version']} {p} {label}", "tokens_per_s": v[f"tokens_per_s_{prec}"],
             "step_ms": v[f"step_ms_{prec}"]}
            for p, v in peers.items() for prec, label in (("fp32", "fp32"), ("bf16", "autocast bf16"))]
    fp32 = recipes.get("fp32")
    bf16 = recipes.get("bf16-amp")
    checks = []
    for name, r in recipes.items():
        ref = "fp32" if "fp32" in name else "bf16"
        ratio = r["tokens_per_s"] / t["tokens_per_s_" + ref]
        row = {"run": "mantissa " + name, "tokens_per_s": r["tokens_per_s"], "step_ms": r["step_ms"],
               "vs_torch": ratio, "torch_ref": ref}
        if fp32:
            row["vs_mantissa_fp32"] = r["tokens_per_s"] / fp32["tokens_per_s"]
        if bf16:
            row["step_vs_bf16_amp"] = r["step_ms"] / bf16["step_ms"]
        rows.append(row)
    checks = rung_checks(size, summary, recipes) + (reference_checks(summary, recipes) if reference else [])
    return size, rows, checks, m.get("skipped", {}), recipes


def has_amx(summary):
    return "amx" in summary["mantissa"].get("matmul_isa", "")


def rung_checks(size, summary, recipes):
    """Targets at every size of the ladder: low precision never slower than fp32 (2x on AMX for
    bf16-amp), FP8 within 1.15x and FP4 within 1.25x of bf16-amp's step."""
    checks = []
    fp32, bf16 = recipes.get("fp32"), recipes.get("bf16-amp")
    for name, r in recipes.items():
        if name.endswith("fp32"):
            continue
        if fp32:
            amx_bf16 = name == "bf16-amp" and has_amx(summary)
            checks.append((f"{size}: mantissa {name} / mantissa fp32 tokens/s" + (" (AMX)" if amx_bf16 else ""),
                           r["tokens_per_s"] / fp32["tokens_per_s"], ">=",
                           TARGETS["bf16_amp_vs_mantissa_fp32_amx" if amx_bf16 else "lowp_vs_mantissa_fp32"]))
        if bf16 and name != "bf16-amp":
            fp4 = "fp4" in name
            if fp4 or "fp8" in name:
                checks.append((f"{size}: mantissa {name} / bf16-amp step time", r["step_ms"] / bf16["step_ms"], "<=",
                               TARGETS["fp4_step_vs_bf16_amp_step_max" if fp4 else "fp8_step_vs_bf16_amp_step_max"]))
    return checks


def reference_checks(summary, recipes):
    """Targets on the reference GPT: against PyTorch 2.x (the PyPI peers) and the FMA peak."""
    checks = []
    peers = {p: v for p, v in summary.get("peers", {}).items() if p.startswith("pypi-")}
    fp32 = recipes.get("fp32")
    compiled = peers.get("pypi-compile")
    if fp32 and compiled:
        checks.append(("mantissa fp32 / PyTorch 2.x torch.compile fp32 tokens/s",
                       fp32["tokens_per_s"] / compiled["tokens_per_s_fp32"], ">=",
                       TARGETS["fp32_vs_torch2_compile_fp32"]))
    if recipes and peers:
        best_name, best = max(recipes.items(), key=lambda kv: kv[1]["tokens_per_s"])
        peer_best = max((v[f"tokens_per_s_{prec}"], f"{p} {prec}") for p, v in peers.items() for prec in ("fp32", "bf16"))
        checks.append((f"mantissa best ({best_name}) / PyTorch 2.x best ({peer_best[1]}) tokens/s",
                       best["tokens_per_s"] / peer_best[0], ">=", TARGETS["best_vs_torch2_best"]))
    peak = (summary["mantissa"].get("peak_gflops") or {}).get("fma_probe")
    if fp32 and peak and fp32.get("breakdown"):
        checks.append(("mantissa fp32 step GFLOP/s / fp32 FMA peak (register probe)",
                       fp32["breakdown"]["step_gflops"] / peak, ">=", TARGETS["fp32_step_fraction_of_fma_peak"]))
    return checks


def parse_matmul(text):
    rows = []
    pat = re.compile(r"^(\S+)\s+(f32|bf16)\s+(plain|packed)\s+([\d.]+)us\s+([\d.]+)us\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")
    for line in text.splitlines():
        g = pat.match(line)
        if g:
            rows.append({"shape": g[1], "type": g[2], "b": g[3], "mantissa_us": float(g[4]), "raw_us": float(g[5]),
                         "wall_ratio": float(g[6]), "mantissa_gflops": float(g[7]), "raw_gflops": float(g[8]),
                         "cpu_ratio": float(g[9])})
    over = re.search(r"fixed overhead per call.*difference ([-\d.]+)us", text)
    return rows, float(over[1]) if over else None


def parse_attention(text):
    """Rows of bench_attention's table: type, T, B, whole/blockwise ms, ratios, saved and peak MiB."""
    rows = []
    num = r"([-\d.]+)"
    pat = re.compile(r"^(f32|bf16)\s+(\d+)\s+(\d+)\s+" + r"\s+".join([num] * 4) + r"\s+\|\s+" + num + r"MiB\s+" +
                     num + r"MiB\s+\|\s+" + num + r"MiB\s+" + num + r"MiB")
    for line in text.splitlines():
        g = pat.match(line)
        if g:
            rows.append({"type": g[1], "T": int(g[2]), "B": int(g[3]), "whole_ms": float(g[4]),
                         "blockwise_ms": float(g[5]), "wall_ratio": float(g[6]), "cpu_ratio": float(g[7]),
                         "saved_whole_mib": float(g[8]), "saved_blockwise_mib": float(g[9]),
                         "peak_whole_mib": float(g[10]), "peak_blockwise_mib": float(g[11])})
    return rows


def parse_convert(doc):
    rows = []
    memcpy = {}
    for b in doc.get("benchmarks", []):
        if b.get("run_type") == "aggregate":
            continue
        name = b["name"]
        size = name.split("/")[-2] if name.endswith("real_time") else name.split("/")[-1]
        ms = b["real_time"] * {"ms": 1.0, "us": 1e-3, "ns": 1e-6}[b["time_unit"]]
        gbs = b.get("bytes_per_second", 0) / 1e9
        if name.startswith("bm_memcpy"):
            memcpy[size] = ms
        rows.append({"name": name.split("/real_time")[0], "elements": int(size), "ms": ms, "gb_per_s": gbs,
                     "memcpy_ns": b.get("memcpy_ns")})
    for r in rows:
        ref = r["memcpy_ns"] * 1e-6 if r["memcpy_ns"] else memcpy.get(str(r["elements"]))
        r["vs_memcpy"] = ref / r["ms"] if ref and r["ms"] > 0 else None
        del r["memcpy_ns"]
    return rows


def host_tier():
    """The CPU this run measured: its model name, the vector ISA flags the kernel tiers read
    (AVX2/FMA/F16C, AVX-512 subsets, AMX) and the caps in force."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    wanted = [x for x in sorted(flags) if x in ("avx2", "fma", "f16c") or x.startswith(("avx512", "amx"))]
    if "amx_bf16" in flags:
        tier = "AMX"
    elif "avx512_bf16" in flags:
        tier = "AVX-512 BF16"
    elif "avx512f" in flags:
        tier = "AVX-512"
    elif {"avx2", "fma", "f16c"} <= flags:
        tier = "AVX2"
    else:
        tier = "scalar"
    caps = {k: os.environ[k] for k in ("MANTISSA_MAX_ISA", "ONEDNN_MAX_CPU_ISA") if os.environ.get(k)}
    return {"model": model, "tier": tier, "flags": wanted, "caps": caps}


def host_line(h):
    caps = ", ".join(f"{k}={v}" for k, v in h["caps"].items())
    return (f"Host: {h['model']}; CPU class **{h['tier']}** (flags: {' '.join(h['flags']) or 'none'})"
            + (f"; capped: {caps} (a cap exercises a code path, not a real host's speed)" if caps else "; no caps"))


def fmt(x, d=1):
    return "-" if x is None else f"{x:,.{d}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--root", default=".")
    a = ap.parse_args()
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=a.root).stdout.strip()
    except OSError:
        commit = ""
    results = {"time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
               "machine": platform.processor() or platform.machine(), "load_average": os.getloadavg()[0],
               "targets": TARGETS, "train": {}, "checks": []}
    results["host"] = host_tier()
    md = []
    train_files = sorted(f for f in os.listdir(a.raw) if f.startswith("train_") and f.endswith(".json"))
    train_files.sort(key=lambda f: (f != "train_ref.json", f))
    for f in train_files:
        s = load(os.path.join(a.raw, f))
        size, rows, checks, skipped, recipes = train_section(s, f == "train_ref.json")
        t = s["torch"]
        results["train"][size] = {"rows": rows, "skipped": skipped, "rounds": s.get("rounds"),
                                  "torch_version": t["torch_version"], "threads": t["threads"],
                                  "peak_gflops": s["mantissa"].get("peak_gflops"),
                                  "breakdown": {n: r.get("breakdown") for n, r in recipes.items()}}
        results["checks"] += [{"what": w, "value": v, "op": op, "target": tg,
                              "met": v >= tg if op == ">=" else v <= tg} for w, v, op, tg in checks]
        if f == "train_ref.json":
            results["torch_version"] = t["torch_version"]
            results["threads"] = t["threads"]
        md.append(f"## Training step, GPT {size} ({t['threads']} threads, torch {t['torch_version']}, "
                  f"median of {s.get('rounds', 1)} alternating round(s))\n")
        mm = s["mantissa"]
        md.append(f"mantissa kernels: {mm.get('kernel_isa', '?')} (host {mm.get('host_isa', '?')}); "
                  f"{mm.get('matmul_route', 'oneDNN ISA ' + mm.get('matmul_isa', '?'))}\n")
        md.append(f"| run | tokens/s | step ms | vs PyTorch {t['torch_version']} (same precision) | vs mantissa fp32 | "
                  "step / bf16-amp step |")
        md.append("|---|---:|---:|---:|---:|---:|")
        for r in rows:
            vs = f"{r['vs_torch']:.2f}x ({r['torch_ref']})" if "vs_torch" in r else "-"
            md.append(f"| {r['run']} | {fmt(r['tokens_per_s'])} | {fmt(r['step_ms'], 1)} | {vs} | "
                      f"{fmt(r.get('vs_mantissa_fp32'), 2)} | {fmt(r.get('step_vs_bf16_amp'), 2)} |")
        for name, why in skipped.items():
            md.append(f"| mantissa {name} | skipped: {why} | | | | |")
        for p, why in s.get("peers_failed", {}).items():
            md.append(f"| PyTorch {p} | left out: {why} | | | | |")
        peaks = s["mantissa"].get("peak_gflops") or {}
        bd = {n: r["breakdown"] for n, r in recipes.items() if r.get("breakdown")}
        if bd:
            md.append(f"\nPer-step breakdown, ms (share); measured matmul peak (1024^3, packed B): "
                      f"f32 {fmt(peaks.get('f32'), 0)} GFLOP/s, bf16 {fmt(peaks.get('bf16'), 0)} GFLOP/s\n")
            names = list(bd)
            md.append("| part | " + " | ".join(names) + " |")
            md.append("|---|" + "---:|" * len(names))
            for c in CATEGORIES:
                md.append(f"| {c} | " + " | ".join(
                    f"{bd[n]['ms'].get(c, 0):.1f} ({100 * bd[n]['share'].get(c, 0):.0f}%)" for n in names) + " |")
            md.append("| profiled step | " + " | ".join(f"{bd[n]['profiled_step_ms']:.1f}" for n in names) + " |")
            md.append("| matmul GFLOP/s (fraction of peak) | " + " | ".join(
                f"{bd[n]['matmul_gflops']:.0f} ({100 * bd[n]['matmul_fraction_of_peak']:.0f}%)" for n in names) + " |")
            md.append("| whole step GFLOP/s (fraction of peak) | " + " | ".join(
                f"{bd[n]['step_gflops']:.0f} ({100 * bd[n]['step_fraction_of_peak']:.0f}%)" for n in names) + " |")
        md.append("")
    mm_path = os.path.join(a.raw, "matmul.txt")
    if os.path.exists(mm_path):
        with open(mm_path) as f:
            mm_rows, fixed_us = parse_matmul(f.read())
        results["matmul"] = {"rows": mm_rows, "fixed_overhead_us": fixed_us}
        if mm_rows:
            worst = max(r["wall_ratio"] for r in mm_rows)
            worst_cpu = max(r["cpu_ratio"] for r in mm_rows)
            # The target uses wall time of the alternating pairs: process CPU time is only a
            # hint, because OpenMP workers spinning after one call bill their wait to the next.
            results["checks"].append({"what": "matmul wrapper / raw oneDNN time (worst shape, wall, paired)",
                                      "value": worst, "op": "<=", "target": TARGETS["matmul_wrapper_vs_raw_max"],
                                      "met": worst <= TARGETS["matmul_wrapper_vs_raw_max"]})
            md.append("## Matrix products: mantissa wrapper vs raw oneDNN (paired medians)\n")
            md.append("| shape | type | B | mantissa us | raw us | wall ratio | cpu ratio | mantissa GFLOP/s |")
            md.append("|---|---|---|---:|---:|---:|---:|---:|")
            for r in mm_rows:
                md.append(f"| {r['shape']} | {r['type']} | {r['b']} | {r['mantissa_us']:.0f} | {r['raw_us']:.0f} | "
                          f"{r['wall_ratio']:.3f} | {r['cpu_ratio']:.3f} | {r['mantissa_gflops']:.0f} |")
            md.append(f"\nworst ratio: wall {worst:.3f}, cpu {worst_cpu:.3f}; fixed overhead per call "
                      f"{fmt(fixed_us, 2)} us\n")
    at_path = os.path.join(a.raw, "attention.txt")
    if os.path.exists(at_path):
        with open(at_path) as f:
            at = parse_attention(f.read())
        results["attention"] = at
        if at:
            md.append("## Attention: blockwise vs whole T x T scores (forward + backward, 2048 tokens, C 256, 4 heads)\n")
            md.append("| type | T | B | whole ms | blockwise ms | blockwise / whole (wall) | (cpu) | saved whole MiB | "
                      "saved blockwise MiB | peak whole MiB | peak blockwise MiB |")
            md.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for r in at:
                md.append(f"| {r['type']} | {r['T']} | {r['B']} | {r['whole_ms']:.1f} | {r['blockwise_ms']:.1f} | "
                          f"{r['wall_ratio']:.2f} | {r['cpu_ratio']:.2f} | {r['saved_whole_mib']:.2f} | "
                          f"{r['saved_blockwise_mib']:.3f} | {r['peak_whole_mib']:.1f} | {r['peak_blockwise_mib']:.1f} |")
            md.append("")
    llmc_path = os.path.join(a.raw, "llmc.txt")
    if os.path.exists(llmc_path):  # bench/run_train_vs_llmc.sh's table
        results["llmc"] = load(os.path.join(a.raw, "llmc.json"))
        for r in results["llmc"]["rows"]:
            if r["mantissa"] == "fp32":
                tg = TARGETS["fp32_vs_llmc_fp32"]
                results["checks"].append({"what": f"GPT-2 124M {results['llmc']['shape']}: mantissa fp32 / llm.c fp32 tokens/s",
                                          "value": r["vs_llmc_fp32"], "op": ">=", "target": tg,
                                          "met": r["vs_llmc_fp32"] >= tg})
        md.append("## GPT-2 124M vs llm.c's fp32 CPU trainer (bench/run_train_vs_llmc.sh)\n")
        md.append("```")
        with open(llmc_path) as f:
            md.append("\n".join(l for l in f.read().splitlines() if not l.startswith("summary:")))
        md.append("```\n")
    cv_path = os.path.join(a.raw, "convert.json")
    if os.path.exists(cv_path):
        cv = parse_convert(load(cv_path))
        results["convert"] = cv
        md.append("## Conversions vs memcpy (GB/s of fp32 input)\n")
        md.append("| case | elements | GB/s | vs memcpy |")
        md.append("|---|---:|---:|---:|")
        for r in cv:
            md.append(f"| {r['name']} | {r['elements']:,} | {r['gb_per_s']:.1f} | {fmt(r['vs_memcpy'], 2)} |")
        md.append("")
    np_path = os.path.join(a.raw, "numpy_convert.json")
    if os.path.exists(np_path):
        doc = load(np_path)
        results["numpy_convert"] = doc
        md.append(f"## Conversions vs numpy {doc['numpy']} + ml_dtypes {doc['ml_dtypes']} astype "
                  "(bench/numpy_convert.py; see docs/formats-speed.md)\n")
        md.append("```")
        with open(os.path.join(a.raw, "numpy_convert.txt")) as f:
            md.append(f.read().rstrip())
        md.append("```\n")
    head = [f"# mantissa performance harness ({results['time_utc']}, commit {commit or '?'}, "
            f"load average {results['load_average']:.1f})\n", host_line(results["host"]) + "\n",
            *(["**--quick run: tiny sizes, one round; it checks that the harness works, its ratios mean "
               "nothing.**\n"] if os.path.exists(os.path.join(a.raw, "quick")) else []),
            "## Targets (ratios measured in this run)\n", "| target | value | goal | met |", "|---|---:|---:|---|"]
    for c in results["checks"]:
        head.append(f"| {c['what']} | {c['value']:.2f} | {c['op']} {c['target']} | {'yes' if c['met'] else 'NO'} |")
    head.append("")
    text = "\n".join(head + md) + "\n"
    os.makedirs(a.out, exist_ok=True)
    write_atomic(os.path.join(a.out, "results.json"), json.dumps(results, indent=1))
    write_atomic(os.path.join(a.out, "summary.md"), text)
    print(text)
    print(f"written: {os.path.join(a.out, 'results.json')}, {os.path.join(a.out, 'summary.md')}")


if __name__ == "__main__":
    main()
