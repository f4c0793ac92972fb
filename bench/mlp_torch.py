"""The PyTorch twin of bench/mlp.cpp: one SGD step of a 784-512-512-10 relu MLP with
cross-entropy at batch 256, median step time in ms. Usage: mlp_torch.py [--threads N] [--reps R]"""
import argparse
import os
import time

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--reps", type=int, default=30)
p.add_argument("--batch", type=int, default=256)
a = p.parse_args()
# torch.set_num_threads sets only torch's own (OpenMP) threads: the OpenBLAS that Debian's
# torch calls for matrix products starts one thread per core unless told otherwise, and
# reads the variable when it loads, so it is set before the import.
os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
import torch  # noqa: E402

torch.set_num_threads(a.threads)
torch.manual_seed(0)
B = a.batch
x = torch.rand(B, 784)
y = torch.tensor([(i * 7) % 10 for i in range(B)])
model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                            torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step():
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


first = step()
for _ in range(3):
    step()
ts = []
for _ in range(a.reps):
    t0 = time.perf_counter()
    last = step()
    ts.append(time.perf_counter() - t0)
ts.sort()
print(f"torch {torch.__version__} mlp batch {B} threads {a.threads}: median step {ts[len(ts) // 2] * 1e3:.3f} ms "
      f"(loss {first:.4f} -> {last:.4f})")
