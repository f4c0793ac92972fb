#!/usr/bin/env python3
"""Puts a gradix depth run and a PyTorch depth run side by side as a Markdown table.

  tools/bench_depth_peers.py GRADIX_LOG TORCH_LOG

GRADIX_LOG: the output of bench/depth (its last JSON line is read); TORCH_LOG: the output of
bench/depth_torch.py (likewise). One row per (case, threads) of either run, in the gradix run's
order, then any the torch run alone has; a missing side shows as "-". The last column says
whether gradix's backward / forward ratio meets its target of at most 3 (docs/performance.md,
"Gradients at depth").
"""
import argparse
import json

TARGET = 3.0


def last_json(path):
    found = None
    with open(path) as f:
        for ln in f:
            ln = ln.strip()
            if ln.startswith("{"):
                found = ln
    if found is None:
        raise SystemExit(f"bench_depth_peers.py: no JSON line in {path}")
    data = json.loads(found)
    if "results" not in data:
        raise SystemExit(f"bench_depth_peers.py: the last JSON line of {path} has no results")
    return data


def index(data):
    return {(r["case"], int(r["threads"])): r for r in data["results"]}


def ms(v):
    return "-" if v is None else f"{v:.3f}"


def ratio(r):
    if r is None:
        return None
    return r.get("ratio", r["backward_ms"] / r["forward_ms"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gradix", help="output of bench/depth (JSON last line)")
    ap.add_argument("torch", help="output of bench/depth_torch.py (JSON last line)")
    a = ap.parse_args()
    g_data, t_data = last_json(a.gradix), last_json(a.torch)
    g, t = index(g_data), index(t_data)
    keys = list(g) + [k for k in t if k not in g]

    print(f"gradix medians of {g_data.get('reps', '?')}, torch medians of {t_data.get('reps', '?')}")
    print()
    print("| case | threads | gradix fwd ms | gradix bwd ms | gradix ratio "
          "| torch fwd ms | torch bwd ms | torch ratio | gradix ratio <= 3 |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | :---: |")
    for k in keys:
        gr, tr = g.get(k), t.get(k)
        grat, trat = ratio(gr), ratio(tr)
        ok = "-" if grat is None else ("yes" if grat <= TARGET else "no")
        print(f"| {k[0]} | {k[1]} "
              f"| {ms(gr and gr['forward_ms'])} | {ms(gr and gr['backward_ms'])} "
              f"| {'-' if grat is None else f'{grat:.2f}'} "
              f"| {ms(tr and tr['forward_ms'])} | {ms(tr and tr['backward_ms'])} "
              f"| {'-' if trat is None else f'{trat:.2f}'} | {ok} |")


if __name__ == "__main__":
    main()
