#!/usr/bin/env bash
# Builds bench/forward.cpp with g++ and with clang++-16 (meson buildtype=release, i.e. -O3, plus
# -Dnative=true, i.e. -march=native), in build-bench-gcc and build-bench-clang, runs both
# (1 thread, medians of REPS interleaved repeats) and prints a table of medians and ratios.
#
#   tools/bench_forward.sh                 # from the repository root
#   REPS=31 tools/bench_forward.sh         # more repeats
#   GCC=g++-13 CLANG=clang++-17 tools/bench_forward.sh
#
# Each run's full output goes to build-bench-<compiler>/forward.txt; its last line is JSON.
# See docs/performance.md for what each figure means.
set -euo pipefail
cd "$(dirname "$0")/.."

REPS=${REPS:-21}
GCC=${GCC:-g++}
CLANG=${CLANG:-clang++-16}

build() {  # build <dir> <c++ compiler>
  local dir=$1 cxx=$2
  if [ ! -f "$dir/build.ninja" ]; then
    CXX=$cxx meson setup "$dir" --buildtype=release -Dnative=true -Dbench=true -Dtests=false \
      -Dcuda=disabled >/dev/null
  else
    meson configure "$dir" -Dbuildtype=release -Dnative=true -Dbench=true >/dev/null
  fi
  ninja -C "$dir" bench/bench_forward >/dev/null
}

jsons=()
for pair in "gcc:$GCC" "clang:$CLANG"; do
  name=${pair%%:*} cxx=${pair#*:}
  dir=build-bench-$name
  echo "== building with $cxx in $dir" >&2
  build "$dir" "$cxx"
  echo "== running $dir/bench/bench_forward --reps=$REPS" >&2
  # exit status 1: the sums were not bitwise equal (the table says so); keep going
  "$dir/bench/bench_forward" --reps="$REPS" | tee "$dir/forward.txt" >&2 ||
    echo "warning: $dir/bench/bench_forward reported a failed check" >&2
  jsons+=("$(tail -n 1 "$dir/forward.txt")")
done

echo
python3 - "${jsons[@]}" <<'PY'
import json, sys
runs = [json.loads(s) for s in sys.argv[1:]]
rows = [
    ("a*b + exp(c): gradix ms", "exp_gradix_ms", "{:.2f}"),
    ("a*b + exp(c): hand loop ms", "exp_hand_ms", "{:.2f}"),
    ("a*b + exp(c): ratio (<= 1.2)", "ratio_exp", "{:.3f}"),
    ("a*b + c: gradix ms", "axpc_gradix_ms", "{:.2f}"),
    ("a*b + c: hand loop ms", "axpc_hand_ms", "{:.2f}"),
    ("a*b + c: ratio (<= 1.2)", "ratio_axpc", "{:.3f}"),
    ("sum(a*b): gradix ms", "sum_gradix_ms", "{:.2f}"),
    ("sum(a*b): scheme loop ms (plain C++)", "sum_scheme_loop_ms", "{:.2f}"),
    ("sum(a*b): scheme loop ms (SIMD)", "sum_scheme_simd_ms", "{:.2f}"),
    ("sum(a*b): ratio to faster scheme loop (<= 1.2)", "ratio_sum", "{:.3f}"),
    ("sum(a*b): bitwise equal to scheme loops", "sum_bitwise_equal", "yesno"),
    ("sum(a*b): naive 1-accumulator loop ms", "sum_naive_1acc_ms", "{:.2f}"),
    ("sum(a*b): naive 8-accumulator loop ms", "sum_naive_8acc_ms", "{:.2f}"),
    ("memcpy 64 MiB ms", "memcpy_ms", "{:.2f}"),
    ("copy loop 64 MiB ms", "copy_loop_ms", "{:.2f}"),
    ("copy bandwidth GB/s (read+written, faster copy)", "copy_gbs", "{:.1f}"),
    ("read-only stream, 1 array GB/s", "read_stream1_gbs", "{:.1f}"),
    ("read-only stream, 2 arrays GB/s", "read_stream2_gbs", "{:.1f}"),
    ("sum(a*b) gradix GB/s (2 x 64 MiB read)", "sum_gradix_gbs", "{:.1f}"),
    ("sum(a*b) % of copy bandwidth (>= 80)", "sum_pct_of_copy", "{:.0f}"),
    ("sum(a*b) % of 1-array read stream", "sum_pct_of_stream1", "{:.0f}"),
    ("sum(a*b) % of 2-array read stream", "sum_pct_of_stream2", "{:.0f}"),
    ("a*b + c gradix GB/s (3 read + 1 written)", "axpc_gradix_gbs", "{:.1f}"),
    ("a*b + c % of copy bandwidth (>= 80)", "axpc_pct_of_copy", "{:.0f}"),
    ("ratios of the minima: a*b + exp(c)", "ratio_exp_of_minima", "{:.3f}"),
    ("ratios of the minima: a*b + c", "ratio_axpc_of_minima", "{:.3f}"),
    ("ratios of the minima: sum(a*b)", "ratio_sum_of_minima", "{:.3f}"),
    ("minima: sum(a*b) % of copy bandwidth", "sum_pct_of_copy_of_minima", "{:.0f}"),
    ("load average before / after (quiet: < 0.5)", "load", "load"),
]
w = max(len(r[0]) for r in rows)
print("| " + "figure".ljust(w) + " | " + " | ".join(r["compiler"].ljust(12) for r in runs) + " |")
print("|-" + "-" * w + "-|-" + "-|-".join("-" * 12 for _ in runs) + "-|")
def cell(fmt, r, key):
    if fmt == "yesno":
        return "yes" if r[key] else "NO"
    if fmt == "load":
        return "{:.2f} / {:.2f}".format(r["load_before"], r["load_after"])
    return fmt.format(r[key])
for label, key, fmt in rows:
    print("| " + label.ljust(w) + " | " + " | ".join(cell(fmt, r, key).ljust(12) for r in runs) + " |")
print("\n(n = {} floats, 1 thread, medians of {} interleaved repeats)".format(runs[0]["n"], runs[0]["reps"]))
PY
