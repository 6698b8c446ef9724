"""Markdown table of val bpc per evaluation step from train_ref.py's JSON lines (--out files) and
`mantissa train --metrics` files, with each run's gap to the first (the baseline) column.

  python bench/unit_reference/table.py NAME=FILE [NAME=FILE ...]
"""
import json
import sys


def load(path):
    """step -> val bpc, from train_ref.py records or mantissa's metrics (records with val_bpc)."""
    out = {}
    try:
        f = open(path)
    except OSError as e:
        sys.exit(f"table.py: cannot read {path}: {e.strerror}")
    with f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            for r in (rec if isinstance(rec, list) else [rec]):
                if isinstance(r, dict) and "val_bpc" in r and "step" in r:
                    out[int(r["step"])] = float(r["val_bpc"])
    return out


def main():
    if len(sys.argv) < 2 or any("=" not in a for a in sys.argv[1:]):
        sys.exit("usage: table.py NAME=FILE [NAME=FILE ...]")
    runs = [(a.split("=", 1)[0], load(a.split("=", 1)[1])) for a in sys.argv[1:]]
    steps = sorted(set().union(*(r.keys() for _, r in runs)))
    print("| step | " + " | ".join(n for n, _ in runs) + " |")
    print("|---" * (len(runs) + 1) + "|")
    base = runs[0][1]
    for s in steps:
        cells = []
        for i, (_, r) in enumerate(runs):
            if s not in r:
                cells.append("-")
            elif i == 0 or s not in base:
                cells.append(f"{r[s]:.3f}")
            else:
                cells.append(f"{r[s]:.3f} ({100 * (r[s] / base[s] - 1):+.1f}%)")
        print(f"| {s} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
