#!/usr/bin/env python3
"""Draws a training run's CSV log (the examples' --log file: epoch, examples, seconds,
examples_per_s, train_loss, then one column per metric) as a PNG: the training loss and each
metric against the epoch, one panel each.

    python3 tools/plot_log.py run.csv [out.png] [--title TITLE]

Needs matplotlib (Debian: apt-get install python3-matplotlib)."""
import argparse
import csv
import sys

try:
    import matplotlib
except ImportError:
    sys.exit("plot_log.py: this python has no matplotlib (Debian: apt-get install python3-matplotlib, "
             "then run the script with Debian's python3)")

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("png", nargs="?")
    p.add_argument("--title", default=None)
    a = p.parse_args()
    with open(a.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{a.csv}: no rows")
    cols = [c for c in rows[0].keys() if c not in ("epoch", "examples", "seconds", "examples_per_s")]
    epochs = [int(r["epoch"]) for r in rows]
    fig, axes = plt.subplots(1, len(cols), figsize=(4.2 * len(cols), 3.4), squeeze=False)
    for ax, c in zip(axes[0], cols):
        ax.plot(epochs, [float(r[c]) for r in rows], marker="o")
        ax.set_xlabel("epoch")
        ax.set_title(c.replace("_", " "))
        ax.grid(alpha=0.3)
    rate = float(rows[-1]["examples_per_s"])
    fig.suptitle(a.title or f"{a.csv} ({rate:,.0f} examples/s)")
    fig.tight_layout()
    out = a.png or a.csv.rsplit(".", 1)[0] + ".png"
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
