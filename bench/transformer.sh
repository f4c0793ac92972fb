#!/usr/bin/env bash
# examples/transformer.cpp against its PyTorch 2 twin (bench/transformer_torch.py), issue 32's
# point 4: the training step at 1 thread (B 16, T 64, D 128, 4 heads, MLP 512, 2 blocks,
# AdamW, clipping), alternating gradix and PyTorch runs (each run: 3 warm-up steps, then
# REPS timed steps, its median), then the loss of both over the same batches.
#
#   bash bench/transformer.sh [BUILD_DIR] [DATA_DIR]
#
# BUILD_DIR (default build-release): a release build (meson setup --buildtype=release); DATA_DIR
# (default /usr/share/games/fortunes, Debian's `fortunes`; tests/data/fortunes is a sample).
# PYTHON: an interpreter with PyTorch 2 (default: BUILD_DIR/venv-torch/bin/python). RUNS
# (default 5) alternating pairs, REPS (default 20) steps per run, STEPS (default 600) for the
# loss comparison (0: none).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-release}
data=${2:-/usr/share/games/fortunes}
py=${PYTHON:-$build/venv-torch/bin/python}
runs=${RUNS:-5}
reps=${REPS:-20}
steps=${STEPS:-600}
ninja -C "$build" examples/transformer >/dev/null
gx_ms=() pt_ms=()
for r in $(seq "$runs"); do
  gx_ms+=("$("$build/examples/transformer" --data "$data" --threads 1 --bench "$reps" | awk '/^step_ms/ {print $2}')")
  pt_ms+=("$("$py" "$root/bench/transformer_torch.py" --data "$data" --threads 1 --bench "$reps" 2>/dev/null | awk '/^step_ms/ {print $2}')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
g=$(median "${gx_ms[@]}")
p=$(median "${pt_ms[@]}")
echo "gradix  step ms per run: ${gx_ms[*]}  median $g"
echo "PyTorch step ms per run: ${pt_ms[*]}  median $p"
awk -v g="$g" -v p="$p" 'BEGIN {printf "gradix / PyTorch: %.2f (issue 32 point 4: at most 1.5)\n", g / p}'
if [ "$steps" -gt 0 ]; then
  every=$((steps / 6))
  a=$(mktemp) b=$(mktemp)
  trap 'rm -f "$a" "$b"' EXIT
  "$build/examples/transformer" --data "$data" --threads 1 --epochs 1 --steps "$steps" --every "$every" --sample 0 \
    | awk '/^step / {print $2, $4}' > "$a"
  "$py" "$root/bench/transformer_torch.py" --data "$data" --threads 1 --steps "$steps" --every "$every" 2>/dev/null \
    | awk '/^step / {print $2, $4}' > "$b"
  echo "step  gradix loss  PyTorch loss (same batches; each its own initial draw)"
  paste -d ' ' "$a" "$b" | awk '{printf "%5d  %11.4f  %12.4f\n", $1, $2, $4}'
fi
