#!/usr/bin/env bash
# Builds bench/depth.cpp (meson buildtype=release, i.e. -O3, and -Dnative=true, i.e.
# -march=native) in build-bench-<compiler> and runs it: backward / forward time for chains of
# depth 1 to 64, a broadcast chain, row max and logsumexp, and a 4-layer elementwise network,
# with 1 thread and with all threads (medians of REPS interleaved repeats).
#
#   tools/bench_depth.sh                   # g++, from the repository root
#   CXX=clang++-16 tools/bench_depth.sh
#   REPS=15 ARGS="--threads 1 --max-depth 16" tools/bench_depth.sh
#
# The run's output goes to build-bench-<compiler>/depth.txt; its last line is JSON. Compiling
# the depth-64 chains takes minutes. See docs/performance.md, "Gradients at depth".
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-9}
CXX=${CXX:-g++}
dir=build-bench-$(basename "$CXX" | sed 's/[^a-z].*//')
if [ ! -f "$dir/build.ninja" ]; then
  CXX=$CXX meson setup "$dir" --buildtype=release -Dnative=true -Dbench=true -Dtests=false \
    -Dcuda=disabled >/dev/null
else
  meson configure "$dir" -Dbuildtype=release -Dnative=true -Dbench=true >/dev/null
fi
echo "== building $dir/bench/bench_depth with $CXX" >&2
ninja -C "$dir" bench/bench_depth >/dev/null
# shellcheck disable=SC2086
"$dir/bench/bench_depth" --reps "$REPS" ${ARGS:-} | tee "$dir/depth.txt"
