#!/usr/bin/env python3
"""Draws the plots of docs/performance.md from the tables in docs/performance.md itself, so a
plot never shows other numbers than the page:

    /usr/bin/python3 tools/plot_performance.py [--check]

needs matplotlib (Debian: apt-get install python3-matplotlib; run with Debian's python3).
Writes docs/images/perf_forward.png, perf_depth.png and perf_training.png. Each table is
found by its header row (TABLES below); a missing or reshaped table is an error naming it.
With --check it only parses the tables and prints what it would plot (no matplotlib needed).
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
page = root / "docs" / "performance.md"
out_dir = root / "docs" / "images"

# header row (exact, as on the page) -> what it is
TABLES = {
    "forward": "| requirement | g++ 12 | clang-16 | met |",
    "depth": "| case | threads | gradix fwd ms | gradix bwd ms | gradix ratio | torch fwd ms | "
             "torch bwd ms | torch ratio | gradix ratio <= 3 |",
    "training": "| step | threads | gradix | PyTorch 1.13 | gradix speed-up | target |",
}


def table(lines, header):
    """Rows (lists of cells) of the first table whose header row is `header`."""
    for i, l in enumerate(lines):
        if l.strip() == header:
            rows = []
            for r in lines[i + 2:]:
                if not r.startswith("|"):
                    break
                rows.append([c.strip() for c in r.strip().strip("|").split("|")])
            return rows
    sys.exit(f"plot_performance: no table with the header {header!r} in {page}")


def number(cell, what):
    m = re.search(r"-?\d+(?:\.\d+)?", cell.replace("*", ""))
    if not m:
        sys.exit(f"plot_performance: no number in {cell!r} ({what})")
    return float(m.group(0))


def forward_data(lines):
    rows = table(lines, TABLES["forward"])
    cases = []
    for r in rows:
        if "within 1.2x" in r[0]:
            name = re.sub(r"\s+\([^()]*\)$", "", re.sub(r"`", "", r[0].split(" within")[0]))
            cases.append((name, number(r[1], r[0]), number(r[2], r[0])))
    if not cases:
        sys.exit("plot_performance: the forward verdict table has no 'within 1.2x' rows")
    return cases


def depth_data(lines):
    rows = table(lines, TABLES["depth"])
    data = {}
    for r in rows:
        case, threads = r[0], int(number(r[1], "threads"))
        data.setdefault(threads, []).append((case, number(r[4], case), number(r[7], case)))
    return data


def training_data(lines):
    rows = table(lines, TABLES["training"])
    data = []
    for r in rows:
        m = re.search(r"median (\d+(?:\.\d+)?)x", r[4])
        if not m:
            sys.exit(f"plot_performance: no median in the training row {r[0]!r}")
        data.append((f"{r[0].split(',')[0]}, {r[1]} thr", float(m.group(1))))
    return data


def main():
    lines = page.read_text().splitlines()
    fwd, depth, train = forward_data(lines), depth_data(lines), training_data(lines)
    if "--check" in sys.argv:
        print("forward:", fwd)
        print("depth:", {t: len(v) for t, v in depth.items()}, "cases per thread count")
        print("training:", train)
        return
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)

    # 1. forward: gradix time / hand-written loop time, both compilers
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = [c[0] for c in fwd]
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], [c[1] for c in fwd], 0.4, label="g++ 12")
    ax.bar([i + 0.2 for i in x], [c[2] for c in fwd], 0.4, label="clang 16")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(1.2, color="red", linestyle="--", linewidth=0.8, label="target 1.2")
    ax.set_xticks(list(x), names)
    ax.set_ylabel("gradix time / hand loop")
    ax.set_title("Forward: fused expression against a hand-written loop")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "perf_forward.png", dpi=110)
    plt.close(fig)

    # 2. depth: backward / forward time ratio per case, gradix and PyTorch
    threads = sorted(depth)
    fig, axes = plt.subplots(len(threads), 1, figsize=(10, 3.0 * len(threads)), squeeze=False)
    for ax, t in zip(axes[:, 0], threads):
        rows = depth[t]
        x = range(len(rows))
        ax.bar([i - 0.2 for i in x], [r[1] for r in rows], 0.4, label="gradix")
        ax.bar([i + 0.2 for i in x], [r[2] for r in rows], 0.4, label="PyTorch 1.13")
        ax.axhline(3.0, color="red", linestyle="--", linewidth=0.8, label="target 3")
        ax.set_xticks(list(x), [r[0] for r in rows], rotation=60, fontsize=7)
        ax.set_ylabel("backward / forward")
        ax.set_title(f"Gradients at depth: {t} thread{'s' if t > 1 else ''}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "perf_depth.png", dpi=110)
    plt.close(fig)

    # 3. training steps: PyTorch time / gradix time (medians)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = [d[0] for d in train]
    ax.barh(range(len(names)), [d[1] for d in train])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up over PyTorch (median of 5 runs)")
    ax.set_title("Training steps")
    fig.tight_layout()
    fig.savefig(out_dir / "perf_training.png", dpi=110)
    plt.close(fig)
    print(f"plot_performance: wrote perf_forward.png, perf_depth.png, perf_training.png in {out_dir}")


if __name__ == "__main__":
    main()
