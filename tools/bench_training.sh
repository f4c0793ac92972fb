#!/usr/bin/env bash
# The MLP step (bench/mlp.cpp), the word2vec step (bench/w2v.cpp, with its hand-written
# loop) and the text-classifier step (bench/textclf.cpp) against their PyTorch twins
# (bench/*_torch.py), and matmul
# forward against cblas_sgemm (bench/matmul.cpp), at 1 thread and all threads, alternating
# gradix and PyTorch runs. Needs a build with -Dbench=true (the default) and PyTorch for
# the interpreter PYTHON (default python3; Debian: apt-get install python3-torch).
#
#   bash tools/bench_training.sh [BUILD_DIR]     (REPS: steps per run, default 30; RUNS: default 3)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build}
py=${PYTHON:-python3}
reps=${REPS:-30}
runs=${RUNS:-3}
ninja -C "$build" bench/bench_mlp bench/bench_matmul bench/bench_w2v bench/bench_textclf >/dev/null
hw=$(nproc)
for t in 1 "$hw"; do
  for r in $(seq "$runs"); do
    "$build/bench/bench_mlp" --threads "$t" --reps "$reps"
    "$py" "$root/bench/mlp_torch.py" --threads "$t" --reps "$reps"
    "$build/bench/bench_w2v" --threads "$t"
    "$py" "$root/bench/w2v_torch.py" --threads "$t"
    "$build/bench/bench_textclf" --threads "$t"
    "$py" "$root/bench/textclf_torch.py" --threads "$t"
  done
done
"$build/bench/bench_matmul"
