"""The PyTorch twin of bench/textclf.cpp: EmbeddingBag (mean, sparse) + Linear +
cross_entropy, SparseAdam for the table and Adam for the layer (lazy Adam's split), on
synthetic bags of 10 to 50 Zipf-like word ids. Median time per step over reps.
Usage: textclf_torch.py [--vocab V] [--dim D] [--batch B] [--classes C] [--reps R] [--threads T]"""
import argparse
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--vocab", type=int, default=6000)
p.add_argument("--dim", type=int, default=64)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--classes", type=int, default=4)
p.add_argument("--reps", type=int, default=300)
p.add_argument("--threads", type=int, default=1)
a = p.parse_args()
# torch.set_num_threads sets only torch's own (OpenMP) threads: the OpenBLAS that Debian's
# torch calls for matrix products starts one thread per core unless told otherwise, and
# reads the variable when it loads, so it is set before the import.
os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(a.threads)
V, D, B, C = a.vocab, a.dim, a.batch, a.classes
w = 1.0 / (np.arange(V) + 10.0)
rng = np.random.default_rng(3)
batches = []
for _ in range(16):
    lens = rng.integers(10, 51, B)
    words = torch.from_numpy(rng.choice(V, int(lens.sum()), p=w / w.sum()))
    offsets = torch.from_numpy(np.concatenate([[0], np.cumsum(lens)[:-1]]))
    labels = torch.from_numpy(rng.integers(0, C, B))
    batches.append((words, offsets, labels))
emb = torch.nn.EmbeddingBag(V, D, mode="mean", sparse=True)
lin = torch.nn.Linear(D, C)
opt_e = torch.optim.SparseAdam(list(emb.parameters()), lr=0.01)
opt_l = torch.optim.Adam(lin.parameters(), lr=0.01)


def step(q):
    words, offsets, labels = batches[q % 16]
    opt_e.zero_grad()
    opt_l.zero_grad()
    loss = torch.nn.functional.cross_entropy(lin(emb(words, offsets)), labels)
    loss.backward()
    opt_e.step()
    opt_l.step()
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
print(f"torch {torch.__version__} textclf V {V} D {D} B {B} C {C} threads {a.threads}: {m * 1e6:.1f} us/step "
      f"({B / m:.0f} quotes/s); last loss {last:.4f}")
