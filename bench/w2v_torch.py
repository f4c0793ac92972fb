"""The PyTorch twin of bench/w2v.cpp: one skip-gram negative-sampling step (B pairs, K
negatives each, two V x D sparse embeddings, SGD), median time per step over reps.
Usage: w2v_torch.py [--vocab V] [--dim D] [--batch B] [--negatives K] [--reps R] [--threads T]"""
import argparse
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--vocab", type=int, default=18000)
p.add_argument("--dim", type=int, default=64)
p.add_argument("--batch", type=int, default=512)
p.add_argument("--negatives", type=int, default=5)
p.add_argument("--reps", type=int, default=200)
p.add_argument("--threads", type=int, default=1)
a = p.parse_args()
# torch.set_num_threads sets only torch's own (OpenMP) threads: the OpenBLAS that Debian's
# torch calls for matrix products starts one thread per core unless told otherwise, and
# reads the variable when it loads, so it is set before the import.
os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(a.threads)
V, D, B, K = a.vocab, a.dim, a.batch, a.negatives
w = 1.0 / (np.arange(V) + 10.0)
rng = np.random.default_rng(5)
batches = []
for _ in range(16):
    c = torch.from_numpy(rng.choice(V, B, p=w / w.sum()))
    o = torch.from_numpy(rng.choice(V, B, p=w / w.sum()))
    n = torch.from_numpy(rng.choice(V, (B, K), p=w / w.sum()))
    batches.append((c, o, n))
win = torch.nn.Embedding(V, D, sparse=True)
wout = torch.nn.Embedding(V, D, sparse=True)
torch.nn.init.uniform_(win.weight, -0.5 / D, 0.5 / D)
torch.nn.init.uniform_(wout.weight, -0.5 / D, 0.5 / D)
opt = torch.optim.SGD(list(win.parameters()) + list(wout.parameters()), lr=0.025 * B)


def step(q):
    c, o, n = batches[q % 16]
    opt.zero_grad()
    v = win(c)
    pos = (v * wout(o)).sum(1)
    neg = torch.bmm(wout(n), v.unsqueeze(2)).squeeze(2)
    loss = -(torch.nn.functional.logsigmoid(pos).sum() + torch.nn.functional.logsigmoid(-neg).sum()) / B
    loss.backward()
    opt.step()
    return loss.item()


for q in range(5):
    step(q)
ts = []
for r in range(a.reps):
    t0 = time.perf_counter()
    last = step(r)
    ts.append(time.perf_counter() - t0)
ts.sort()
m = ts[len(ts) // 2]
print(f"torch {torch.__version__} w2v V {V} D {D} B {B} K {K} threads {a.threads}: {m * 1e6:.1f} us/step "
      f"({B / m:.0f} pairs/s); last loss {last:.4f}")
