#!/usr/bin/env python3
"""PyTorch peer of bench/depth.cpp: the cost of a gradient at depth (benchmark, not a test).

For each expression of bench/depth.cpp, with the same sizes and value ranges (the random
values are torch's, not gradix's counter-based ones), the time of computing the loss with
autograd and calling .backward() (forward + backward, like gx::backward(loss), which computes
the value too) against the time of computing the loss under torch.no_grad() (the forward pass
alone, like gx::value(loss)).

  tanh-k    sum(chain_k(x)),  chain(e) = tanh(e) * 0.9 + 0.05          x: 1M floats in [0.25, 0.75)
  exp-k     sum(chain_k(x)),  chain(e) = exp(e * 0.5 - 0.5) * 0.5
  mix-k     sum(chain_k(x)),  chain(e) = exp(tanh(e) * w - 0.5)    w: a second 1M leaf, [0, 0.5)
  bcast-k   sum(chain_k(X)),  chain(e) = tanh(e * c + r)              X: 1024 x 1024 in [0, 1),
            r: 1 x 1024 in [0, 0.1), c: 1024 x 1 in [0.5, 1); X, r and c are parameters
  rowmax    sum(max over axis 1 of M)                                 M: 4096 x 1024, normal
  net4      sum(h4), h_i = tanh(w_i * h_(i-1) + b_i), h_0 = x in [0, 1): 1M floats; w_i in
            [0, 1), b_i in [0, 0.1) (1M each) are the 8 parameters
  logsumexp sum(log(sum_1(exp(M - max_1(M, keepdim)))) + max_1(M))
  softmax-ce the same minus sum(M * T), T: 4096 x 1024 soft targets in [0, 1/512)

Every case runs --reps times (default 9) after one warm-up, forward and backward interleaved;
the figures are medians. Gradients are set to None between repeats, outside the timing.
--threads N (repeatable; default: 1 and then all threads), --max-depth K (default 64). The
output lines match bench/depth.cpp's; the last line is one JSON object with the same keys
(tools/bench_depth_peers.py puts the two side by side).

  python3 bench/depth_torch.py [--reps N] [--threads N]... [--max-depth K]

PyTorch: Debian's python3-torch (/usr/bin/python3) or any CPU build; peers are not part of
the build or the tests.
"""

import argparse
import json
import os
import sys
import time

import torch

results = []
sink = 0.0


def uniform(shape, lo=0.0, hi=1.0, grad=False):
    t = torch.empty(shape, dtype=torch.float32).uniform_(lo, hi)
    return t.requires_grad_(grad)


def tanh_chain(e, k):
    for _ in range(k):
        e = torch.tanh(e) * 0.9 + 0.05
    return e


def exp_chain(e, k):
    for _ in range(k):
        e = torch.exp(e * 0.5 - 0.5) * 0.5
    return e


def mix_chain(e, w, k):
    for _ in range(k):
        e = torch.exp(torch.tanh(e) * w - 0.5)
    return e


def bcast_chain(e, c, r, k):
    for _ in range(k):
        e = torch.tanh(e * c + r)
    return e


def measure(name, threads, reps, loss, params):
    """loss: a function building the scalar loss; params: the leaves whose gradients are taken."""
    global sink

    def clear():
        for p in params:
            p.grad = None

    def fwd():
        global sink
        with torch.no_grad():
            sink += float(loss())

    def bwd():
        global sink
        l = loss()
        l.backward()
        sink += float(l.detach())

    fwd()  # warm-up
    bwd()
    clear()
    tf, tb = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        fwd()
        t1 = time.perf_counter()
        bwd()
        t2 = time.perf_counter()
        clear()
        tf.append(t1 - t0)
        tb.append(t2 - t1)
    # depth.cpp takes v[size / 2] of the sorted times: the upper median for an even count.
    f_ms = sorted(tf)[len(tf) // 2] * 1e3
    b_ms = sorted(tb)[len(tb) // 2] * 1e3
    print("%-14s threads %2d  forward %9.3f ms  backward %9.3f ms  ratio %6.2f"
          % (name, threads, f_ms, b_ms, b_ms / f_ms), flush=True)
    results.append({"case": name, "threads": threads, "forward_ms": f_ms, "backward_ms": b_ms})


def run_all(threads, reps, max_depth):
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    n = 1 << 20
    x = uniform((n,), 0.25, 0.75, grad=True)
    w = uniform((n,), 0.0, 0.5, grad=True)
    k = 1
    while k <= max_depth:
        measure("tanh-%d" % k, threads, reps, lambda k=k: tanh_chain(x, k).sum(), [x])
        measure("exp-%d" % k, threads, reps, lambda k=k: exp_chain(x, k).sum(), [x])
        measure("mix-%d" % k, threads, reps, lambda k=k: mix_chain(x, w, k).sum(), [x, w])
        k *= 2

    X = uniform((1024, 1024), grad=True)
    r = uniform((1, 1024), 0.0, 0.1, grad=True)
    c = uniform((1024, 1), 0.5, 1.0, grad=True)
    measure("bcast-4", threads, reps, lambda: bcast_chain(X, c, r, 4).sum(), [X, r, c])
    measure("bcast-16", threads, reps, lambda: bcast_chain(X, c, r, 16).sum(), [X, r, c])

    M = torch.randn((4096, 1024), dtype=torch.float32).requires_grad_(True)
    T = uniform((4096, 1024), 0.0, 1.0 / 512)  # soft targets
    measure("rowmax", threads, reps, lambda: M.max(dim=1).values.sum(), [M])

    h0 = uniform((n,))
    ps = []
    for _ in range(4):
        ps += [uniform((n,), 0.0, 1.0, grad=True), uniform((n,), 0.0, 0.1, grad=True)]

    def net4():
        h = h0
        for i in range(4):
            h = torch.tanh(ps[2 * i] * h + ps[2 * i + 1])
        return h.sum()

    measure("net4", threads, reps, net4, ps)

    # As written in depth.cpp: the row max appears twice (gradix keeps the first one per call).
    def lse():
        m = M.max(dim=1, keepdim=True).values
        return (torch.log(torch.exp(M - m).sum(dim=1)) + M.max(dim=1).values).sum()

    measure("logsumexp", threads, reps, lse, [M])
    measure("softmax-ce", threads, reps, lambda: lse() - (M * T).sum(), [M])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--threads", type=int, action="append", default=[])
    ap.add_argument("--max-depth", type=int, default=64)
    a = ap.parse_args()
    if a.reps < 1:
        ap.error("--reps must be at least 1")
    threads = a.threads
    if not threads:
        threads = [1]
        allt = os.cpu_count() or 1
        if allt > 1:
            threads.append(allt)
    print("torch bench/depth_torch.py: torch %s, threads %s, backward(loss) / value(loss), "
          "medians of %d" % (torch.__version__, " ".join(map(str, threads)), a.reps), flush=True)
    for t in threads:
        run_all(t, a.reps, a.max_depth)
    out = {"reps": a.reps, "results": [
        {"case": r["case"], "threads": r["threads"], "forward_ms": round(r["forward_ms"], 4),
         "backward_ms": round(r["backward_ms"], 4),
         "ratio": round(r["backward_ms"] / r["forward_ms"], 3)} for r in results]}
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
