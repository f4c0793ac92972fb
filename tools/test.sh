#!/usr/bin/env bash
# Builds gradix and runs every test suite, then prints `N passed, N failed, N skipped`.
#
#   bash tools/test.sh [MESON_OPTION...] [-- MESON_TEST_ARG...]
#
# MESON_OPTION (e.g. -Dgradix_werror=true) goes to `meson setup` on the first run and to
# `meson configure` later; MESON_TEST_ARG (e.g. --suite host) to `meson test`.
# GRADIX_BUILD_DIR picks the build directory (default: build); CXX the compiler (first run).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=tools/deps.sh
source tools/deps.sh
gradix_need_packages meson ninja-build g++ libboost-dev doctest-dev cmake pkg-config libopenblas-dev libboost-context-dev || exit 1

build=${GRADIX_BUILD_DIR:-build}
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
