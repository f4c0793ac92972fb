#!/usr/bin/env bash
# examples/char_rnn.cpp against its PyTorch 2 twin (bench/char_rnn_torch.py, nn.LSTM), issue
# 34's point 5: the training step at 1 thread (batch 32, 64 steps, embedding 64, 256 LSTM
# units, Adam, clipping), alternating gradix and PyTorch runs (each run: 3 warm-up steps,
# then REPS timed steps, its median).
#
#   bash bench/char_rnn.sh [BUILD_DIR] [DATA_DIR]
#
# BUILD_DIR (default build-release): a release build (meson setup --buildtype=release); DATA_DIR
# (default /usr/share/games/fortunes, Debian's `fortunes`; tests/data/fortunes is a sample).
# PYTHON: an interpreter with PyTorch 2 (default: BUILD_DIR/venv-torch/bin/python). RUNS
# (default 5) alternating pairs, REPS (default 10) steps per run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-release}
data=${2:-/usr/share/games/fortunes}
py=${PYTHON:-$build/venv-torch/bin/python}
runs=${RUNS:-5}
reps=${REPS:-10}
ninja -C "$build" examples/char_rnn >/dev/null
gx_ms=() pt_ms=()
for r in $(seq "$runs"); do
  gx_ms+=("$("$build/examples/char_rnn" --data "$data" --threads 1 --bench "$reps" | awk '/^step_ms/ {print $2}')")
  pt_ms+=("$("$py" "$root/bench/char_rnn_torch.py" --data "$data" --threads 1 --bench "$reps" 2>/dev/null | awk '/^step_ms/ {print $2}')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
g=$(median "${gx_ms[@]}")
p=$(median "${pt_ms[@]}")
echo "gradix  step ms per run: ${gx_ms[*]}  median $g"
echo "PyTorch step ms per run: ${pt_ms[*]}  median $p"
awk -v g="$g" -v p="$p" 'BEGIN {printf "gradix / PyTorch: %.2f (issue 34 point 5: at most 1.5)\n", g / p}'
