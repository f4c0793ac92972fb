"""The peer for the embedding-bag benchmarks (issue 35): FBGEMM's table-batched embedding
(TBE) on the CPU, with the optimizer fused into the backward pass.

Install (a venv under the build folder; nothing in bench/ needs it to build):
    python3 -m venv build-release/venv-fbgemm
    build-release/venv-fbgemm/bin/pip install fbgemm-gpu-cpu==1.9.0 torch==2.14.1
fbgemm-gpu-cpu pins a torch release train (1.9 -> 2.14, 1.8 -> 2.13, ...; see the table in
fbgemm_gpu/__init__.py). The plain `torch` wheel (CUDA build) runs on the CPU.

The exact FBGEMM call (fbgemm_gpu 1.9.0):
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        SplitTableBatchedEmbeddingBagsCodegen)
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import (
        BoundsCheckMode, ComputeDevice, EmbeddingLocation, PoolingMode)
    from fbgemm_gpu.split_embedding_configs import EmbOptimType as OptimType, SparseType
    emb = SplitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[(rows_t, 64, EmbeddingLocation.HOST, ComputeDevice.CPU), ...],
        optimizer=OptimType.EXACT_ROWWISE_ADAGRAD,   # or OptimType.EXACT_SGD
        learning_rate=0.01, eps=1e-8,
        weights_precision=SparseType.FP32,           # or SparseType.FP16
        output_dtype=SparseType.FP32,
        pooling_mode=PoolingMode.SUM,
        stochastic_rounding=True,                    # (fp16 weights only; --check uses False)
        bounds_check_mode=BoundsCheckMode.NONE,      # --bounds-check warning: the default
    )
    out = emb(indices, offsets)      # int64; offsets has T*B+1 entries, feature-major:
                                     # bag b of table t is indices[offsets[t*B+b]:offsets[t*B+b+1]]
                                     # out: [B, T*64] (tables side by side), fp32
    loss.backward()                  # the backward applies the optimizer to the weights in place
    (one feature per table: feature_table_map left at its default, the identity)
Kernel paths (FBGEMM's embedding_*_split_cpu sources): the forward calls fbgemm's
GenerateEmbeddingSpMDMWithStrides for fp32 and fp16 weights; the backward takes fbgemm's
JIT kernels (SpMDM over the transposed bags + GenerateSparseAdaGrad) only for
EXACT_ROWWISE_ADAGRAD with fp32 weights, and a plain C++ loop otherwise (EXACT_SGD, fp16).
Where the JIT has no kernel for the CPU, fbgemm falls back to reference code; the
environment variables FBGEMM_FORCE_AUTOVEC=1 / FBGEMM_NO_ASMJIT=1 pick other fbgemm paths.

Cases (one step = forward, scalar loss, backward with the fused optimizer update):
  founding:    Ea 1,000,000 x 64 and Eb 65,535 x 64; 100 terms, each = sum over Eb rows
               0..4999 + one random Ea row; as TBE input: batch 100, one bag per table per
               sample (Ea bags of 1 random row, Eb bags of rows 0..4999); loss = sum of outputs.
  recommender: 8 tables 1,000,000 x 64, batch 2048, 20 random rows per bag (seeded), sum
               pooling; loss = concat(pooled) [2048 x 512] @ fixed random vector, summed.
Optimizers: founding with EXACT_ROWWISE_ADAGRAD and EXACT_SGD, recommender with
EXACT_ROWWISE_ADAGRAD; fp32 or fp16 weights (--dtype). Reported: median ms of the forward
alone and of the whole step, over --reps after --warmup steps; peak RSS of the case (VmHWM,
reset before each case where the kernel allows it).
--check: tiny tables, compares FBGEMM's forward and its fused row-wise Adagrad / SGD update
against plain PyTorch (row-wise Adagrad: state[r] += mean_d g[r,d]^2;
w[r] -= lr * g[r] / (sqrt(state[r]) + eps), g = the row's gradient summed over the batch).

Usage: tbe_torch.py [--case founding|recommender|all] [--dtype f32|f16|both]
                    [--reps 7] [--warmup 2] [--threads 1] [--bounds-check none|warning]
                    [--csv FILE] [--check]
"""
import argparse
import gc
import os
import statistics
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--case", choices=["founding", "recommender", "all"], default="all")
p.add_argument("--dtype", choices=["f32", "f16", "both"], default="both")
p.add_argument("--reps", type=int, default=7)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--threads", type=int, default=1)
p.add_argument("--bounds-check", choices=["none", "warning"], default="none")
p.add_argument("--csv", help="also write the table as CSV to this file")
p.add_argument("--check", action="store_true", help="correctness check on tiny tables only")
a = p.parse_args()
# torch.set_num_threads sets torch's own threads; set the OpenMP/OpenBLAS ones before import.
os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
import torch  # noqa: E402
import fbgemm_gpu  # noqa: E402,F401  (registers torch.ops.fbgemm)
from fbgemm_gpu.split_embedding_configs import EmbOptimType as OptimType  # noqa: E402
from fbgemm_gpu.split_embedding_configs import SparseType  # noqa: E402
from fbgemm_gpu.split_table_batched_embeddings_ops_common import (  # noqa: E402
    BoundsCheckMode,
    ComputeDevice,
    EmbeddingLocation,
    PoolingMode,
)
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (  # noqa: E402
    SplitTableBatchedEmbeddingBagsCodegen,
)

torch.set_num_threads(a.threads)
D = 64
PREC = {"f32": SparseType.FP32, "f16": SparseType.FP16}
TDT = {"f32": torch.float32, "f16": torch.float16}


def make_tbe(rows, dim, optim, dtype, lr=0.01, eps=1e-8, stochastic=True):
    # doc-snippet: tbe_call
    emb = SplitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[(r, dim, EmbeddingLocation.HOST, ComputeDevice.CPU) for r in rows],
        optimizer=optim,
        learning_rate=lr,
        eps=eps,
        weights_precision=PREC[dtype],
        output_dtype=SparseType.FP32,
        pooling_mode=PoolingMode.SUM,
        stochastic_rounding=stochastic,
        bounds_check_mode=(BoundsCheckMode.NONE if a.bounds_check == "none"
                           else BoundsCheckMode.WARNING),
    )
    # end doc-snippet
    return emb


def bags(per_table, B):
    """per_table: list over tables of a list of B index tensors -> (indices, offsets)."""
    idx, lens = [], []
    for t_bags in per_table:
        assert len(t_bags) == B
        for bag in t_bags:
            idx.append(bag)
            lens.append(len(bag))
    offsets = torch.zeros(len(lens) + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(torch.tensor(lens, dtype=torch.int64), 0)
    return torch.cat(idx).to(torch.int64), offsets


def rss_reset():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def rss_peak_mib():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def median_ms(fn, inputs):
    for i in range(a.warmup):
        fn(*inputs[i % len(inputs)])
    ts = []
    for i in range(a.reps):
        x = inputs[i % len(inputs)]
        t0 = time.perf_counter()
        fn(*x)
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def founding_inputs(n, seed):
    g = torch.Generator().manual_seed(seed)
    B, EA, EB = 100, 1_000_000, 65_535
    eb_bag = torch.arange(5000, dtype=torch.int64)
    out = []
    for _ in range(n):
        ea = torch.randint(0, EA, (B,), generator=g)
        out.append(bags([[ea[i:i + 1] for i in range(B)], [eb_bag] * B], B))
    return [EA, EB], out, None


def recommender_inputs(n, seed):
    g = torch.Generator().manual_seed(seed)
    T, R, B, L = 8, 1_000_000, 2048, 20
    out = []
    for _ in range(n):
        idx = torch.randint(0, R, (T * B * L,), generator=g)
        offsets = torch.arange(0, T * B * L + 1, L, dtype=torch.int64)
        out.append((idx, offsets))
    v = torch.randn(T * D, generator=g)
    return [R] * T, out, v


def run_case(name, optim, dtype):
    gc.collect()
    have_reset = rss_reset()
    n_inputs = max(1, min(a.reps + a.warmup, 4))
    rows, inputs, v = (founding_inputs if name == "founding" else recommender_inputs)(
        n_inputs, 17)
    emb = make_tbe(rows, D, optim, dtype)
    emb.init_embedding_weights_uniform(-0.05, 0.05)

    def fwd(idx, off):
        emb(idx, off)

    def step(idx, off):
        # doc-snippet: tbe_step
        out = emb(idx, off)
        loss = out.sum() if v is None else (out @ v).sum()
        loss.backward()  # applies the optimizer to the weights in place
        # end doc-snippet

    f_ms = median_ms(fwd, inputs)
    s_ms = median_ms(step, inputs)
    peak = rss_peak_mib()
    del emb
    gc.collect()
    return dict(case=name, optimizer=optim.name, dtype=dtype, threads=a.threads,
                forward_ms=f_ms, step_ms=s_ms,
                peak_rss_mib=peak, rss_scope="case" if have_reset else "process")


def check():
    """Tiny tables: FBGEMM fused update against a hand-written PyTorch reference."""
    g = torch.Generator().manual_seed(3)
    rows, dim, B, lr, eps = [50, 30], 8, 6, 0.1, 1e-3
    results = []
    for dtype in ("f32", "f16"):
        for optim in (OptimType.EXACT_ROWWISE_ADAGRAD, OptimType.EXACT_SGD):
            emb = make_tbe(rows, dim, optim, dtype, lr=lr, eps=eps, stochastic=False)
            emb.init_embedding_weights_uniform(-0.5, 0.5)
            ws = [w.float().clone() for w in emb.split_embedding_weights()]
            st = [torch.zeros(r) for r in rows]
            v = torch.randn(len(rows) * dim, generator=g)
            fwd_err = upd_err = st_err = 0.0
            for _ in range(3):
                # random bags with repeats (within and across bags), some empty bags
                per_table = []
                for r in rows:
                    lens = torch.randint(0, 5, (B,), generator=g).tolist()
                    per_table.append([torch.randint(0, min(r, 10), (n,), generator=g)
                                      for n in lens])
                idx, off = bags(per_table, B)
                out = emb(idx, off)
                # reference: pooled sums and dense gradients by autograd
                ref_w = [w.clone().requires_grad_(True) for w in ws]
                cols = []
                for t, w in enumerate(ref_w):
                    cols.append(torch.stack([w[bag].sum(0) if len(bag) else
                                             torch.zeros(dim) for bag in per_table[t]]))
                ref_out = torch.cat(cols, 1)
                fwd_err = max(fwd_err, (out.detach() - ref_out.detach()).abs().max().item())
                (ref_out @ v).sum().backward()
                (out @ v).sum().backward()
                for t, w in enumerate(ref_w):
                    gr = w.grad
                    if optim == OptimType.EXACT_ROWWISE_ADAGRAD:
                        st[t] += (gr * gr).mean(1)
                        ws[t] = ws[t] - lr * gr / (st[t].sqrt() + eps)[:, None]
                    else:
                        ws[t] = ws[t] - lr * gr
                    if dtype == "f16":  # FBGEMM stores the rounded weights
                        ws[t] = ws[t].half().float()
                got = [w.float().clone() for w in emb.split_embedding_weights()]
                upd_err = max(upd_err, max((x - y).abs().max().item()
                                           for x, y in zip(got, ws)))
                if optim == OptimType.EXACT_ROWWISE_ADAGRAD:
                    mom = [s[0] for s in emb.split_optimizer_states()]
                    st_err = max(st_err, max((m.float() - s).abs().max().item()
                                             for m, s in zip(mom, st)))
                ws = got  # continue from FBGEMM's weights so errors do not compound
            results.append((dtype, optim.name, fwd_err, upd_err, st_err))
    print("check: tables %s x %d, batch %d, 3 steps, lr %g, eps %g" % (rows, dim, B, lr, eps))
    print("%-5s %-22s %12s %12s %12s" % ("dtype", "optimizer", "fwd maxabs", "w maxabs",
                                          "state maxabs"))
    for r in results:
        print("%-5s %-22s %12.3g %12.3g %12.3g" % r)


print("torch %s, fbgemm_gpu %s, threads %d" % (torch.__version__, fbgemm_gpu.__version__,
                                             torch.get_num_threads()))
if a.check:
    check()
    sys.exit(0)

dtypes = ["f32", "f16"] if a.dtype == "both" else [a.dtype]
cases = []
if a.case in ("founding", "all"):
    cases += [("founding", OptimType.EXACT_ROWWISE_ADAGRAD, d) for d in dtypes]
    cases += [("founding", OptimType.EXACT_SGD, d) for d in dtypes]
if a.case in ("recommender", "all"):
    cases += [("recommender", OptimType.EXACT_ROWWISE_ADAGRAD, d) for d in dtypes]
rows_out = []
print("%-12s %-22s %-5s %8s %12s %10s %10s" % ("case", "optimizer", "dtype", "threads",
                                              "forward ms", "step ms", "peak MiB"))
for c in cases:
    try:
        r = run_case(*c)
    except Exception as e:  # e.g. a precision/optimizer pair the CPU kernels lack
        print("%-12s %-22s %-5s unsupported: %s" % (c[0], c[1].name, c[2],
                                                   str(e).splitlines()[0][:80]))
        continue
    rows_out.append(r)
    print("%-12s %-22s %-5s %8d %12.3f %10.3f %10.0f%s" % (
        r["case"], r["optimizer"], r["dtype"], r["threads"], r["forward_ms"], r["step_ms"],
        r["peak_rss_mib"], "" if r["rss_scope"] == "case" else " (process)"))
if a.csv and rows_out:
    with open(a.csv, "w") as f:
        keys = list(rows_out[0].keys())
        f.write(",".join(keys) + "\n")
        for r in rows_out:
            f.write(",".join(("%.4f" % r[k]) if isinstance(r[k], float) else str(r[k])
                             for k in keys) + "\n")
