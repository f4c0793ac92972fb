#!/usr/bin/env python3
"""PyTorch 2 twin of examples/char_rnn.cpp (benchmark, not a test).

The same character-level LSTM language model with the same shapes and training step:
token embedding (V, D), one torch.nn.LSTM layer (D -> H; PyTorch's fused LSTM, its four
gates from two products and two biases), a linear map of every step's h to the vocabulary,
cross_entropy over every position, Adam (lr 3e-3) with gradient-norm clipping at 1.0. The
batches are the example's: B windows of T + 1 bytes from the same linear congruential
generator and seed, time-major. The initial weights are torch's own.

  python3 bench/char_rnn_torch.py --data DIR [--bench R] [--threads T] [--batch B]
                                  [--context T] [--dim D] [--hidden H] [--gru]

With --bench R: 3 warm-up steps, then R timed steps; prints one line "step_ms <median> <min>".
Without: trains --steps steps and prints the training loss every --every steps.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from transformer_torch import LCG, read_quotes  # noqa: E402  (the example's text and batches)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--files", default="computers,politics,science,songs-poems")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--bench", type=int, default=0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
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
    V, B, T, D, H = len(byte_of), a.batch, a.context, a.dim, a.hidden
    tokens = [id_of[ch] for ch in text]
    n_train = len(tokens) * 9 // 10

    emb = torch.nn.Embedding(V, D)
    rnn = torch.nn.LSTM(D, H)
    out = torch.nn.Linear(H, V)
    params = list(emb.parameters()) + list(rnn.parameters()) + list(out.parameters())
    opt = torch.optim.Adam(params, lr=a.lr)
    rng = LCG(a.seed)
    ids = torch.empty(T, B, dtype=torch.long)
    tgt = torch.empty(T, B, dtype=torch.long)

    def fill_batch():
        for b in range(B):
            s = rng.next() % (n_train - T)
            window = tokens[s:s + T + 1]
            ids[:, b] = torch.tensor(window[:T])
            tgt[:, b] = torch.tensor(window[1:])

    def step():
        opt.zero_grad(set_to_none=False)
        h, _ = rnn(emb(ids))  # (T, B, H), zero initial state
        loss = F.cross_entropy(out(h.reshape(T * B, H)), tgt.reshape(T * B))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, a.clip)
        opt.step()
        return loss.item()

    if a.bench > 0:
        times = []
        for k in range(a.bench + 3):
            fill_batch()
            t0 = time.perf_counter()
            step()
            if k >= 3:
                times.append((time.perf_counter() - t0) * 1e3)
        print("step_ms %.3f %.3f" % (statistics.median(times), min(times)))
        return
    for k in range(1, a.steps + 1):
        fill_batch()
        loss = step()
        if k % a.every == 0 or k == 1:
            print("step %d loss %.4f" % (k, loss))


if __name__ == "__main__":
    main()
