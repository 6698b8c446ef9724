"""Per-op forward and backward RMS of the library-built unit GPT (train_ref.py's) on one training batch at
initialisation, side by side with `mantissa analyse`'s scales.csv for the same model and recipe:

  build/mantissa analyse --model gpt --recipe unit-fp32 --threads 1 --out DIR
  python bench/unit_reference/scales_ref.py --mantissa DIR/scales.csv [--seed 1337]

Prints op, pass, library RMS, mantissa RMS and their ratio (ops in model order). The two batches are
different random windows of the same corpus, so ratios within a few percent are agreement.
"""
import argparse
import csv
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_ref  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mantissa", required=True, help="scales.csv of `mantissa analyse --recipe unit-fp32`")
    ap.add_argument("--data", default=".cache/data/austen.txt")
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    train, _ = train_ref.load_split(args.data)
    B, T = 16, 128
    model = train_ref.unit_gpt(256, T, 256, 4, 4, 0.01, 0.5, 1.0)
    starts = np.random.default_rng(args.seed).integers(0, len(train) - T, size=B)
    idx = torch.stack([train[s: s + T] for s in starts])
    tgt = torch.stack([train[s + 1: s + T + 1] for s in starts])
    fwd, bwd, order = {}, {}, []

    def obs(name, t):
        order.append(name)
        fwd[name] = t.detach().double().pow(2).mean().sqrt().item()
        t.register_hook(lambda g: bwd.__setitem__(name, g.double().pow(2).mean().sqrt().item()))
        return t

    model.loss(idx, tgt, obs).backward()
    ours = {}
    with open(args.mantissa) as f:
        for row in csv.DictReader(f):
            ours[(row["op"], row["pass"])] = float(row["rms"])
    print(f"{'op':<16} {'pass':<8} {'library':>9} {'mantissa':>9} {'ratio':>7}")
    for pass_, table in (("forward", fwd), ("backward", bwd)):
        for name in order:
            m = ours.get((name, pass_))
            lib = table.get(name, float("nan"))
            ratio = f"{lib / m:7.3f}" if m else "      -"
            print(f"{name:<16} {pass_:<8} {lib:9.4f} {m if m else float('nan'):9.4f} {ratio}")


if __name__ == "__main__":
    main()
