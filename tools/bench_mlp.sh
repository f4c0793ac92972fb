#!/usr/bin/env bash
# The MLP step (bench/mlp.cpp) against its PyTorch twin (bench/mlp_torch.py) and matmul
# forward against cblas_sgemm (bench/matmul.cpp), at 1 thread and all threads, alternating
# gradix and PyTorch runs. Needs a build with -Dbench=true (the default) and PyTorch for
# the interpreter PYTHON (default python3; Debian: apt-get install python3-torch).
#
#   bash tools/bench_mlp.sh [BUILD_DIR]     (REPS: steps per run, default 30; RUNS: default 3)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
py=${PYTHON:-python3}
reps=${REPS:-30}
runs=${RUNS:-3}
ninja -C "$build" bench/bench_mlp bench/bench_matmul >/dev/null
hw=$(nproc)
for t in 1 "$hw"; do
  for r in $(seq "$runs"); do
    "$build/bench/bench_mlp" --threads "$t" --reps "$reps"
    "$py" "$root/bench/mlp_torch.py" --threads "$t" --reps "$reps"
  done
done
"$build/bench/bench_matmul"
