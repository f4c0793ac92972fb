#!/usr/bin/env bash
# Builds gradix and runs every test suite, then prints `N passed, N failed, N skipped`.
#
#   bash tools/test.sh [MESON_OPTION...] [-- MESON_TEST_ARG...]
#
# MESON_OPTION (e.g. -Dgradix_werror=true) goes to `meson setup` on the first run and to
# `meson configure` later; MESON_TEST_ARG (e.g. --suite host) to `meson test`.
# GRADIX_BUILD_DIR picks the build directory (default: build); CXX the compiler (first run).
#
# Without CXX, the first run builds with clang++-16 (installed like the other packages): the
# gradient tests are mostly code generation, which clang does 3.3x faster at -O0 than g++ at
# -O1, and test_optimization=auto (the default) builds them at -O0 and the suites that run
# long at -O2. On 2 cores a fresh clone builds and tests in about 8 minutes this way; with
# CXX=g++ in about 12 (docs/performance.md, "The developer loop"). CI runs both compilers.
# Where ccache is installed, meson uses it, and a rebuild of unchanged files is a cache hit.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=tools/deps.sh
source tools/deps.sh
packages=(meson ninja-build g++ libboost-dev doctest-dev cmake pkg-config libopenblas-dev libboost-context-dev)
build=${GRADIX_BUILD_DIR:-build}
if [ -z "${CXX:-}" ] && [ ! -f "$build/build.ninja" ]; then
  packages+=(clang-16)
  export CXX=clang++-16
fi
gradix_need_packages "${packages[@]}" || exit 1

setup_args=()
test_args=()
while [ $# -gt 0 ]; do
  if [ "$1" = -- ]; then
    shift
    test_args=("$@")
    break
  fi
  setup_args+=("$1")
  shift
done

if [ ! -f "$build/build.ninja" ]; then
  if [ -f "$build/meson-private/coredata.dat" ]; then
    meson setup --reconfigure "$build" "${setup_args[@]}"
  else
    meson setup "$build" "${setup_args[@]}"
  fi
elif [ ${#setup_args[@]} -gt 0 ]; then
  meson configure "$build" "${setup_args[@]}"
fi

if ! meson compile -C "$build"; then
  echo "gradix: the build failed (counted as one failure)" >&2
  python3 tools/testlog_summary.py --failed 1
  exit 1
fi

# A stale log must not be counted if meson test cannot run at all.
rm -f "$build/meson-logs/testlog.json"
status=0
meson test -C "$build" --print-errorlogs "${test_args[@]}" || status=$?
python3 tools/testlog_summary.py "$build" || status=1
exit "$status"
