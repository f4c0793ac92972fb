#!/usr/bin/env python3
"""PyTorch 2 twin of examples/transformer.cpp (benchmark, not a test).

The same character-level causal language model with the same shapes, initial scales and
training step: token embedding plus learned positions, 2 pre-norm blocks (multi-head causal
self-attention with explicit products, softmax and a causal mask, as examples/transformer.cpp
writes it; --sdpa uses torch.nn.functional.scaled_dot_product_attention instead), GELU MLP
with biases, final layer norm, a linear map to the vocabulary, cross_entropy over every
position, AdamW (lr 1e-3, weight decay 0.01 on every parameter, as gx::optim::adamw) with
gradient-norm clipping at 1.0. The text, the vocabulary (bytes in order of first
appearance), the 90 / 10 split and the batches (the same linear congruential generator and
seed) are the example's, so both see the same windows in the same order; the initial
weights are torch's own draws with the example's scales.

  python3 bench/transformer_torch.py --data DIR [--steps N] [--bench R] [--threads T] ...

Without --bench: trains --steps steps and prints the training loss every --every steps
(the lines bench/transformer.sh compares with the example's). With --bench R: 3 warm-up
steps, then R timed steps; prints one line "step_ms <median> <min>" (milliseconds per step).
"""
import argparse
import math
import os
import statistics
import sys
import time


def read_quotes(path):
    """The example's read_quotes: every line (as std::getline reads them) plus a newline,
    a line holding one '%' (between quotes) as an empty line."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return b"".join(b"\n" if line == b"%" else line + b"\n" for line in lines)


class LCG:
    def __init__(self, seed):
        self.state = (seed * 0x9E3779B97F4A7C15 + 1) % (1 << 64)

    def next(self):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return self.state >> 33


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--files", default="computers,politics,science,songs-poems")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--bench", type=int, default=0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--gelu", choices=["tanh", "erf"], default="tanh")
    ap.add_argument("--sdpa", action="store_true")
    a = ap.parse_args()

    import torch
    import torch.nn.functional as F

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    text = b"".join(read_quotes(os.path.join(a.data, f)) for f in a.files.split(","))
    id_of, byte_of = {}, []
    for ch in text:
        if ch not in id_of:
            id_of[ch] = len(byte_of)
            byte_of.append(ch)
    V, T, D, H, FF, B = len(byte_of), a.context, a.dim, a.heads, a.ff, a.batch
    tokens = torch.tensor([id_of[ch] for ch in text], dtype=torch.long)
    n_train = len(tokens) * 9 // 10
    layers = 2

    def mat(r, c, sd):
        return (torch.randn(r, c) * sd).requires_grad_()

    def const(n, v):
        return torch.full((n,), float(v)).requires_grad_()

    params = {}
    params["E"], params["P"] = mat(V, D, 0.02), mat(T, D, 0.01)
    res_sd = 0.02 / math.sqrt(2 * layers)
    for l in range(layers):
        p = params
        p[f"g1{l}"], p[f"b1{l}"] = const(D, 1), const(D, 0)
        p[f"Wq{l}"], p[f"Wk{l}"], p[f"Wv{l}"] = mat(D, D, 0.02), mat(D, D, 0.02), mat(D, D, 0.02)
        p[f"Wo{l}"] = mat(D, D, res_sd)
        p[f"g2{l}"], p[f"b2{l}"] = const(D, 1), const(D, 0)
        p[f"W1{l}"], p[f"W2{l}"] = mat(D, FF, 0.02), mat(FF, D, res_sd)
        p[f"c1{l}"], p[f"c2{l}"] = const(FF, 0), const(D, 0)
    params["gf"], params["bf"], params["Wout"] = const(D, 1), const(D, 0), mat(D, V, 0.02)
    opt = torch.optim.AdamW(list(params.values()), lr=a.lr, weight_decay=0.01)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    dh = D // H
    approx = "tanh" if a.gelu == "tanh" else "none"

    def attention(p, l, x):
        q = (x @ p[f"Wq{l}"]).view(B, T, H, dh).transpose(1, 2)
        k = (x @ p[f"Wk{l}"]).view(B, T, H, dh).transpose(1, 2)
        v = (x @ p[f"Wv{l}"]).view(B, T, H, dh).transpose(1, 2)
        if a.sdpa:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(dh))
            o = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v
        return o.transpose(1, 2).reshape(B, T, D) @ p[f"Wo{l}"]

    def logits(p, ids):
        x = p["E"][ids].view(B, T, D) + p["P"][:T]
        for l in range(layers):
            x = x + attention(p, l, F.layer_norm(x, (D,), p[f"g1{l}"], p[f"b1{l}"], 1e-5))
            h = F.layer_norm(x, (D,), p[f"g2{l}"], p[f"b2{l}"], 1e-5)
            x = x + F.gelu(h @ p[f"W1{l}"] + p[f"c1{l}"], approximate=approx) @ p[f"W2{l}"] + p[f"c2{l}"]
        return F.layer_norm(x, (D,), p["gf"], p["bf"], 1e-5).reshape(B * T, D) @ p["Wout"]

    rng = LCG(a.seed)

    def batch():
        ids = torch.empty(B * T, dtype=torch.long)
        tg = torch.empty(B * T, dtype=torch.long)
        for b in range(B):
            s = rng.next() % (n_train - T)
            ids[b * T:(b + 1) * T] = tokens[s:s + T]
            tg[b * T:(b + 1) * T] = tokens[s + 1:s + T + 1]
        return ids, tg

    def step():
        ids, tg = batch()
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(logits(params, ids), tg)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(params.values()), a.clip)
        opt.step()
        return loss.item()

    if a.bench:
        for _ in range(3):
            step()
        times = []
        for _ in range(a.bench):
            t0 = time.perf_counter()
            step()
            times.append((time.perf_counter() - t0) * 1e3)
        print(f"step_ms {statistics.median(times):.3f} {min(times):.3f}")
        return
    for s in range(1, a.steps + 1):
        loss = step()
        if s % a.every == 0 or s == 1:
            print(f"step {s} loss {loss:.4f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
