#!/usr/bin/env python3
"""PyTorch 2 twin of bench/blocks.cpp: issue 32's model blocks (benchmark, not a test).

The same blocks, written the same way (the layer norm and gelu spelled out, not
torch.nn.functional's), at the same shapes, each summed as sum(square(block)), at 1 thread:

  matmul        X @ W
  mlp_gelu      gelu(X @ W1) @ W2, gelu(h) = 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))
  layer_norm    ln(X) = (X - mean) / sqrt(mean(square(X - mean)) + eps), means over the last
                axis with keepdim, eps 1e-5 (no affine parameters)
  ln_matmul     ln(X) @ W
  residual      X + ln(X) @ W
  rms_norm      X / sqrt(mean(square(X)) + eps), the mean over the last axis
  softmax       softmax(X @ W, dim=2)
  log_softmax   log_softmax(X @ W, dim=2)
  attention     softmax((X @ W) @ X.permute(0, 2, 1), dim=2) @ X
  causal_head   q, k, v = X @ Wq, X @ Wk, X @ Wv;
                softmax(where(mask, q @ k.permute(0, 2, 1) / sqrt(D), -1e9), dim=2) @ v,
                mask (T, T), true on and below the diagonal
  transformer   h = X + causal_head(ln(X)) @ Wo; h + gelu(ln(h) @ W1) @ W2

X (B, T, D) = (4, 32, 64) is a constant, W (D, D), W1 (D, FF), W2 (FF, D), FF = 256, and
Wq, Wk, Wv, Wo (D, D) are parameters (requires_grad); --large: B 16, T 64, D 128, FF 512;
--x-param: X requires grad too (then the norm blocks' gradients cross the normalization).
The random values are torch's, with the scales of bench/blocks.cpp (X standard normal, each
W normal with standard deviation 1 / sqrt(its rows)).

Timings, each the median over up to --reps repeats (default 9) after one warm-up, the three
interleaved, gradients set to None between repeats outside the timing:

  forward   the loss under torch.no_grad() (gx::value(loss) in bench/blocks.cpp)
  backward  loss.backward() alone, after a forward that records the graph (the issue's
            PyTorch column: ratio = backward / forward)
  step      that forward with the graph plus loss.backward() (what gx::backward(loss)
            does: the value and every gradient; step_ratio = step / forward compares with
            bench/blocks.cpp's ratio)

A block without a parameter (layer_norm and rms_norm with a constant X) has no backward: its
step is the loss alone and its backward 0, as gx::backward computes the value alone there.

--limit S (default 3): once a block's backward steps (the warm-up's included) have taken
more than S seconds, its remaining repeats are skipped. --only BLOCK (repeatable). The
output lines follow bench/blocks.cpp's; the last line is one JSON object with every median
and ratio.

  python3 bench/blocks_torch.py [--reps N] [--large] [--x-param] [--limit S] [--only BLOCK]...

PyTorch: pip install torch (PyTorch 2, a CPU build is enough) into a venv under the build
folder, e.g. python3 -m venv build/venv-torch, then build/venv-torch/bin/pip install torch
numpy (without numpy, torch warns that it is missing; nothing here uses it), and run this file
with build/venv-torch/bin/python3 (Debian's python3-torch works too).
Twins are not part of the build or the tests.
"""

import argparse
import json
import math
import os
import sys
import time

# torch.set_num_threads sets torch's own (OpenMP) threads only; a BLAS that torch calls
# reads its thread count when it loads, so these are set before the import.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"
import torch  # noqa: E402

EPS = 1e-5
BLOCKS = ["matmul", "mlp_gelu", "layer_norm", "ln_matmul", "residual", "rms_norm", "softmax",
          "log_softmax", "attention", "causal_head", "transformer"]
results = []
sink = 0.0


def median(v):
    # bench/blocks.cpp takes v[size / 2] of the sorted times: the upper median for an even count.
    return sorted(v)[len(v) // 2]


def gelu(h):  # tanh form, written out
    return 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * h * h * h)))


def layer_norm(x):
    c = x - x.mean(dim=2, keepdim=True)
    return c / torch.sqrt(torch.square(c).mean(dim=2, keepdim=True) + EPS)


def rms_norm(x):
    return x / torch.sqrt(torch.square(x).mean(dim=2, keepdim=True) + EPS)


def loss_of(block):
    return torch.square(block).sum()


def measure(a, name, loss, params):
    """loss: builds the scalar loss; params: the leaves whose gradients are taken."""
    global sink

    def clear():
        for p in params:
            p.grad = None

    def fwd():
        global sink
        with torch.no_grad():
            sink += float(loss())

    def step():
        t0 = time.perf_counter()
        l = loss()
        t1 = time.perf_counter()
        if params:  # without one (a constant X in a norm block) there is no graph: the value alone
            l.backward()
        t2 = time.perf_counter()
        return l, t2 - t1, t2 - t0

    t0 = time.perf_counter()
    fwd()  # warm-up
    t1 = time.perf_counter()
    l, wb, ws = step()
    sink += float(l.detach())
    clear()
    spent = ws
    tf, tb, ts = [], [], []
    for _ in range(a.reps):
        if spent > a.limit:
            break
        s0 = time.perf_counter()
        fwd()
        s1 = time.perf_counter()
        l, b, s = step()
        sink += float(l.detach())
        clear()
        tf.append(s1 - s0)
        tb.append(b)
        ts.append(s)
        spent += s
    if tf:
        f_ms, b_ms, s_ms = median(tf) * 1e3, median(tb) * 1e3, median(ts) * 1e3
    else:
        f_ms, b_ms, s_ms = (t1 - t0) * 1e3, wb * 1e3, ws * 1e3
    print("%-12s forward %10.3f ms  backward %10.3f ms  ratio %8.2f  step %10.3f ms  "
          "step/forward %8.2f  (%d repeats%s%s)"
          % (name, f_ms, b_ms, b_ms / f_ms, s_ms, s_ms / f_ms, len(tf),
             ", time limit" if len(tf) < a.reps else "", ", no parameter" if not params else ""),
          flush=True)
    results.append({"block": name, "status": "ok", "forward_ms": round(f_ms, 4),
                    "backward_ms": round(b_ms, 4), "step_ms": round(s_ms, 4),
                    "ratio": round(b_ms / f_ms, 3), "step_ratio": round(s_ms / f_ms, 3),
                    "timed": len(tf), "params": len(params)})


def run_all(a):
    B, T, D, FF = (16, 64, 128, 512) if a.large else (4, 32, 64, 256)
    torch.manual_seed(1)

    def init(rows, cols):
        return (torch.randn(rows, cols) / math.sqrt(rows)).requires_grad_(True)

    X = torch.randn(B, T, D).requires_grad_(a.x_param)
    W, W1, W2 = init(D, D), init(D, FF), init(FF, D)
    Wq, Wk, Wv, Wo = init(D, D), init(D, D), init(D, D), init(D, D)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))  # position t sees positions 0..t
    scale = 1.0 / math.sqrt(D)
    xs = [X] if a.x_param else []

    def causal_head(x):
        q, k, v = x @ Wq, x @ Wk, x @ Wv
        scores = (q @ k.permute(0, 2, 1)) * scale
        return torch.softmax(torch.where(mask, scores, -1e9), dim=2) @ v

    def transformer():
        h = X + causal_head(layer_norm(X)) @ Wo
        return h + gelu(layer_norm(h) @ W1) @ W2

    blocks = {
        "matmul": (lambda: X @ W, [W]),
        "mlp_gelu": (lambda: gelu(X @ W1) @ W2, [W1, W2]),
        "layer_norm": (lambda: layer_norm(X), []),
        "ln_matmul": (lambda: layer_norm(X) @ W, [W]),
        "residual": (lambda: X + layer_norm(X) @ W, [W]),
        "rms_norm": (lambda: rms_norm(X), []),
        "softmax": (lambda: torch.softmax(X @ W, dim=2), [W]),
        "log_softmax": (lambda: torch.log_softmax(X @ W, dim=2), [W]),
        "attention": (lambda: torch.softmax((X @ W) @ X.permute(0, 2, 1), dim=2) @ X, [W]),
        "causal_head": (lambda: causal_head(X), [Wq, Wk, Wv]),
        "transformer": (transformer, [Wq, Wk, Wv, Wo, W1, W2]),
    }
    for name in BLOCKS:
        if a.only and name not in a.only:
            continue
        block, params = blocks[name]
        measure(a, name, lambda block=block: loss_of(block()), params + xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--large", action="store_true")
    ap.add_argument("--x-param", action="store_true")
    ap.add_argument("--limit", type=float, default=3.0)
    ap.add_argument("--only", action="append", default=[], choices=BLOCKS)
    a = ap.parse_args()
    if a.reps < 1:
        ap.error("--reps must be at least 1")
    torch.set_num_threads(1)
    print("torch bench/blocks_torch.py: torch %s, 1 thread, %s shapes, X %s, sum(square(block)), "
          "backward / forward and step / forward, medians of up to %d (limit %.1f s of steps per "
          "block)" % (torch.__version__,
                      "large (B 16, T 64, D 128, FF 512)" if a.large else "small (B 4, T 32, D 64, FF 256)",
                      "a parameter" if a.x_param else "constant", a.reps, a.limit), flush=True)
    run_all(a)
    out = {"bench": "blocks", "impl": "torch", "torch": torch.__version__, "large": a.large,
           "reps": a.reps, "limit_s": a.limit, "x_param": a.x_param, "results": results}
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
