#!/usr/bin/env bash
# Runs the libFuzzer target tests/fuzz/fuzz_index.cpp (clang-16, AddressSanitizer + UBSan)
# from the committed corpus for a while; new inputs go to a scratch folder under the build
# directory, never into the repository. A finding leaves its input there (crash-*) and exits
# non-zero; turn it into a file of tests/fuzz/corpus/ (the fuzz_corpus test replays it).
#
#   bash tools/fuzz.sh [SECONDS]      (default 60)
#
# FUZZ_BUILD_DIR picks the folder (default build-fuzz).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=tools/deps.sh
source tools/deps.sh
gradix_need_packages clang-16 libclang-rt-16-dev libboost-dev || exit 1

seconds=${1:-60}
out=${FUZZ_BUILD_DIR:-build-fuzz}
mkdir -p "$out/corpus"
exe=$out/fuzz_index
if [ ! -x "$exe" ] || [ tests/fuzz/fuzz_index.cpp -nt "$exe" ] || \
   [ -n "$(find include -newer "$exe" -name '*.hpp' -print -quit)" ]; then
  echo "fuzz: building $exe"
  start=$(date +%s)
  clang++-16 -std=c++20 -O1 -g -Iinclude -DGRADIX_CHECK_LIFETIMES -DGRADIX_ENABLE_ASSERTS \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    tests/fuzz/fuzz_index.cpp -o "$exe"
  echo "fuzz: built in $(($(date +%s) - start))s"
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# -rss_limit_mb: under the sanitizers; -timeout: one input must not take 10 s
"$exe" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$out/" "$out/corpus" tests/fuzz/corpus 2>&1 | tail -n 25
