#!/usr/bin/env python3
"""The step-time and memory model of docs/distributed.md, "Scale": what a step of a sharded
embedding model costs on N nodes, for tables of 10^8 to 10^10 rows. A model, not a
measurement: every assumption is a parameter below, and the doc names where each comes from.

usage: python3 tools/dist_model.py [--markdown]

A step (gradix::dist, exact mode) on N ranks, one per node, global batch B samples of F ids,
blocks of G samples, rows of d floats:
  fetch: each rank sends its distinct ids to their owners (8 bytes each) and gets the rows
         back (4 d bytes); a fraction (N-1)/N of them lives elsewhere.
  push:  each (block, distinct id in the block) row goes to its owner with its key
         (16 + 4 d bytes), the same fraction remote.
  owner: sums the pushed rows and runs lazy Adam on the touched rows (memory bound:
         about 10 passes of 4 d bytes per touched row, read and write).
  dense: the data-parallel exchange of P dense parameters (exact mode: each rank sends
         its blocks' shares and gathers the sums: (blocks per rank + 1) P 4 bytes).
  compute: the model's own forward and backward per sample (c_sample seconds per sample
         per node), divided over the nodes.
Time per exchange: messages x alpha + bytes / beta (one NIC per node, sends and receives
overlapping); the step is the sum (no overlap assumed between the phases: pessimistic).
"""

import sys

# ---- assumptions (docs/distributed.md says where each comes from)
d = 128            # row length (MLPerf DLRM's embedding dimension)
F = 26             # ids per sample (Criteo's 26 categorical features)
B = 65536          # global batch (MLPerf DLRM: 55296-65536 on the published runs)
G = 1024           # samples per block
u_block = 0.35     # distinct ids per block / ids per block (skewed ids repeat)
u_rank = 0.25      # distinct ids per rank / ids per rank (more repeats across blocks)
P = 2_000_000      # dense parameters (DLRM's MLPs: a few million)
alpha = 5e-6       # seconds per message (InfiniBand HDR, through MPI)
beta = 20e9        # bytes per second per node (HDR 200 Gb/s = 25 GB/s, 80% reached)
mem_bw = 100e9     # bytes per second of a node's memory (owner-side sums and Adam)
c_sample = 10e-6   # seconds of model compute per sample on one two-socket node (see the doc)
node_mem = 512 * 2**30  # bytes of memory per node
row_bytes_state = 4 * d * 3 + 8 + 4  # value, m, v; lazy Adam's last step; the slot map


def step(N, rows):
    ids_rank = B / N * F
    blocks = B / G
    remote = (N - 1) / N
    fetch_bytes = ids_rank * u_rank * remote * (8 + 4 * d)
    push_bytes = (blocks / N) * G * F * u_block * remote * (16 + 4 * d)
    msgs = 4 * (N - 1)  # per table exchange: ids and rows (fetch), keys and rows (push)
    t_fetch = msgs / 2 * alpha + fetch_bytes / beta
    t_push = msgs / 2 * alpha + push_bytes / beta
    # the owner receives about as much as each rank pushes (uniform placement)
    t_owner = (blocks / N) * G * F * u_block * 10 * 4 * d / mem_bw
    t_dense = 2 * (N - 1) * alpha + ((blocks / N) + 1) * P * 4 * remote / beta
    t_compute = B / N * c_sample
    t = t_fetch + t_push + t_owner + t_dense + t_compute
    mem = rows / N * row_bytes_state
    return t, fetch_bytes + push_bytes, mem, t - t_compute


def main(argv):
    md = "--markdown" in argv
    nodes = [8, 16, 32, 64]
    tables = [10**8, 10**9, 10**10]
    if md:
        print("| nodes | step (ms) | of which exchanges (ms) | sent per node per step (MB) | samples/s | "
              + " | ".join(f"memory per node, 10^{len(str(r)) - 1} rows" for r in tables) + " |")
        print("| --- | --- | --- | --- | --- | " + " | ".join("---" for _ in tables) + " |")
    for N in nodes:
        t, sent, _, comm = step(N, tables[0])
        mems = []
        for r in tables:
            m = step(N, r)[2]
            fits = "" if m <= node_mem else " (does not fit)"
            mems.append(f"{m / 2**30:.0f} GiB{fits}")
        if md:
            print(f"| {N} | {t * 1e3:.1f} | {comm * 1e3:.1f} | {sent / 1e6:.1f} | {B / t / 1e6:.2f} M | " + " | ".join(mems) + " |")
        else:
            print(f"{N:3d} nodes: step {t * 1e3:6.1f} ms ({comm * 1e3:5.1f} ms of exchanges), {sent / 1e6:6.1f} MB sent per node, "
                  f"{B / t / 1e6:5.2f} M samples/s; memory per node: " + ", ".join(mems))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
