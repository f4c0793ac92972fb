#!/usr/bin/env python3
"""Prints the raw JSON summaries and the Markdown table of tools/bench_peers.sh.

Reads the manifest that bench_peers.sh writes (one line per run: kind, tag, scale, log path,
tab-separated) and the run logs it names:
  cxx-compare    bench/seed_compare: last line JSON (gradix and hand medians, interleaved)
  cxx-embedding  examples/seed_embedding: last line JSON (per-term form, peak_rss_mib)
  cxx-batched    examples/seed_embedding --batched: last line JSON
  torch          seed_torch.py: the `SUMMARY {json}` line (times scaled by `scale` to full n)
"""
import argparse
import json
import sys


def last_json(path):
    with open(path) as f:
        lines = [ln.strip() for ln in f if ln.strip().startswith("{")]
    if not lines:
        raise SystemExit(f"bench_table.py: no JSON summary in {path}")
    return json.loads(lines[-1])


def torch_summary(path):
    summary, loss = None, None
    with open(path) as f:
        for ln in f:
            if ln.startswith("SUMMARY "):
                summary = json.loads(ln[len("SUMMARY "):])
            elif ln.startswith("{"):
                try:
                    rec = json.loads(ln)
                except ValueError:
                    continue
                if "loss" in rec and not rec.get("warmup", False):
                    loss = rec["loss"]
    if summary is not None and loss is not None:
        summary["last_loss"] = loss
    return summary


def ms(x):
    if x is None:
        return "—"
    v = 1e3 * x
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def ratio(x):
    if x is None:
        return "—"
    if x >= 100:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 0.1:
        return f"{x:.2f}"
    return f"{x:.2g}"


TORCH_LABELS = {
    "manual": "PyTorch `manual` (no autograd, `index_add_`)",
    "emb_sparse": "PyTorch `emb_sparse` (`F.embedding(sparse=True)`)",
    "dense": "PyTorch `dense` (indexing + autograd)",
    "index_select": "PyTorch `index_select`",
    "emb_dense": "PyTorch `emb_dense` (`F.embedding`)",
    "jit": "PyTorch `jit` (TorchScript)",
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("manifest")
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--na", type=int, required=True)
    ap.add_argument("--nb", type=int, required=True)
    ap.add_argument("--k", type=int, required=True)
    ap.add_argument("--layout", default="col")
    ap.add_argument("--reps", type=int, required=True)
    ap.add_argument("--torch-reps", type=int, required=True)
    ap.add_argument("--load", nargs=2, default=["?", "?"])
    ap.add_argument("--elapsed", type=int, default=0)
    ap.add_argument("--nproc", default="?")
    a = ap.parse_args()

    runs = []
    with open(a.manifest) as f:
        for ln in f:
            kind, tag, scale, path = ln.rstrip("\n").split("\t")
            runs.append((kind, tag, float(scale), path))

    # ---------------------------------------------------------------- raw summaries
    print("## Raw summaries\n")
    cxx = {}      # compiler label -> {run kind: json}
    torch = []    # (variant, hugetlb, scale, summary or None)
    for kind, tag, scale, path in runs:
        if kind.startswith("cxx-"):
            js = last_json(path)
            cxx.setdefault(tag, {})[kind[4:]] = js
            print(f"{kind[4:]} [{tag}]: {json.dumps(js)}")
        else:
            variant, _, hp = tag.partition(":")
            s = torch_summary(path)
            torch.append((variant, hp == "hugetlb", scale, s))
            if s is None:
                print(f"torch {variant}: FAILED (see {path})")
            else:
                shown = {k: v for k, v in s.items() if k not in ("fwd_all", "bwd_all")}
                print(f"torch {variant}{' [hugetlb]' if hp else ''}: {json.dumps(shown)}")
    print()

    # ---------------------------------------------------------------- PyTorch best backward
    tvals = []
    for variant, hp, scale, s in torch:
        if s is None:
            tvals.append((variant, hp, scale, None, None, None, None))
            continue
        tvals.append((variant, hp, scale, s["fwd_med_s"] * scale, s["bwd_med_s"] * scale,
                      s["vmhwm_max_kB"] / 1024.0, s))
    ok = [t for t in tvals if t[4] is not None]
    best = min(ok, key=lambda t: t[4]) if ok else None
    best_bwd = best[4] if best else None

    def vs_best(b):
        return ratio(best_bwd / b) if best_bwd is not None and b else "—"

    # ---------------------------------------------------------------- table
    rows = []
    for comp, r in cxx.items():
        c, e = r.get("compare"), r.get("embedding")
        rows.append(("gradix, per term", comp, c["gradix_forward_s"], c["gradix_backward_s"],
                     e["peak_rss_mib"] if e else None))
    for comp, r in cxx.items():
        c, b = r.get("compare"), r.get("batched")
        rows.append(("gradix, batched (one expression)", comp, b["forward_s"] if b else None,
                     c["gradix_batched_backward_s"], b["peak_rss_mib"] if b else None))
    for comp, r in cxx.items():
        c = r.get("compare")
        rows.append(("hand-written C++ loop", comp, c["hand_forward_s"], c["hand_backward_s"], None))
    scaled_note = False
    for variant, hp, scale, fwd, bwd, rss, s in tvals:
        label = TORCH_LABELS.get(variant, f"PyTorch `{variant}`")
        cfg = (f"torch {s['torch']}" if s else "torch") + (", huge-page malloc" if hp else "")
        if scale != 1:
            n_run = round(a.n / scale)
            label += f" †(n = {n_run}, x{scale:g})"
            scaled_note = True
        if s is None:
            rows.append((label + " — FAILED", cfg, None, None, None))
        else:
            rows.append((label, cfg, fwd, bwd, rss))

    hdr = ["implementation", "build", f"forward (ms, n = {a.n})", f"backward (ms, n = {a.n})",
           "peak RSS (MiB)", "PyTorch best backward / this backward"]
    print("## Table\n")
    print("| " + " | ".join(hdr) + " |")
    print("| " + " | ".join(["---"] * 2 + ["---:"] * 4) + " |")
    for label, cfg, f, b, rss in rows:
        print("| " + " | ".join([label, cfg, ms(f), ms(b), "—" if rss is None else f"{rss:,.1f}",
                                 vs_best(b)]) + " |")
    print()

    imports = max((s["rss_after_import_kB"] / 1024.0 for *_, s in tvals if s), default=None)
    tables_mib = (a.na + a.nb) * 64 * 4 / 2**20
    print(f"Ea 64 x {a.na:,}, Eb 64 x {a.nb:,}, k = {a.k:,}, n = {a.n}, float32, 1 thread; "
          f"tables {tables_mib:,.1f} MiB. gradix / hand: {a.layout}-major tables, medians of "
          f"{a.reps} reps; PyTorch: row-major tables with row gathers (the same memory), medians "
          f"of {a.torch_reps} reps after 1 warm-up, one process per variant.")
    print("gradix and hand-loop times come from `bench/seed_compare` (interleaved in one process); "
          "gradix's peak RSS from `examples/seed_embedding` (per term) and the batched row's "
          "forward and peak RSS from `seed_embedding --batched`. PyTorch's peak RSS is VmHWM, "
          "reset before each rep; it includes the interpreter and torch's libraries"
          + (f" ({imports:,.0f} MiB after `import torch`)." if imports else "."))
    if scaled_note:
        print("† slow variants run with fewer terms; their times are multiplied to n = "
              f"{a.n} (per-term cost is constant), their peak RSS is as measured with fewer terms.")
    if best is not None:
        print(f"\nPyTorch's best backward: `{best[0]}`" + (" with huge-page malloc" if best[1] else "")
              + f", {ms(best_bwd)} ms.")
        for comp, r in cxx.items():
            c = r["compare"]
            print(f"- {comp}: PyTorch best backward / gradix per-term backward = "
                  f"{ratio(best_bwd / c['gradix_backward_s'])}, / gradix batched backward = "
                  f"{ratio(best_bwd / c['gradix_batched_backward_s'])}")
    # losses: the same hash-initialised data everywhere, so they should agree closely
    losses = []
    for comp, r in cxx.items():
        losses.append((f"gradix {comp}", r["compare"]["loss_gradix"]))
        losses.append((f"hand {comp}", r["compare"]["loss_hand"]))
    for variant, hp, scale, fwd, bwd, rss, s in tvals:
        if s is not None and scale == 1 and "last_loss" in s:
            losses.append((f"PyTorch {variant}", s["last_loss"]))
    if losses:
        ref = losses[0][1]
        spread = max(abs(v - ref) for _, v in losses)
        print(f"\nLosses (same data everywhere): {', '.join(f'{k} {v:.6g}' for k, v in losses)}; "
              f"largest difference {spread:.3g}.")
    print(f"Load average (1, 5, 15 min) before: {a.load[0]}, after: {a.load[1]}, on {a.nproc} CPUs; "
          f"the whole run took {a.elapsed} s.")


if __name__ == "__main__":
    sys.exit(main())
