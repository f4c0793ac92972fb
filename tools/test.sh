#!/usr/bin/env bash
# Builds gradix and runs every test suite, then prints `N passed, N failed, N skipped`.
#
#   bash tools/test.sh [--quick] [MESON_OPTION...] [-- MESON_TEST_ARG...]
#
# --quick builds only what the suite `quick` needs (the core, expr, plan, gradcheck,
# reliability and interop tests, the small examples, the docs checks) and runs that suite.
#
# MESON_OPTION (e.g. -Dgradix_werror=true) goes to `meson setup` on the first run and to
# `meson configure` later; MESON_TEST_ARG (e.g. --suite host) to `meson test`.
# GRADIX_BUILD_DIR picks the build directory (default: build); CXX the compiler (first run);
# GRADIX_SETUP_OPTIONS more options for `meson setup` (as tools/example.sh takes them).
#
# An existing build directory is checked first: if it was configured without an optional
# feature whose packages are installed now (OpenBLAS, the grid emulator's Boost.Context,
# MPI, nvcc; meson records what it found in <build>/gradix-features.txt), or with
# -Dtests=false, the script says so and reconfigures it, so that every suite this machine
# can run is built (tools/example.sh, run first as the README says, installs fewer packages).
#
# Without CXX, the first run (no build directory yet; tools/example.sh sets one up with c++)
# builds with clang++-16 (installed like the other packages): the
# gradient tests are mostly code generation, which clang does 3.3x faster at -O0 than g++ at
# -O1, and test_optimization=auto (the default) builds them at -O0 and the suites that run
# long at -O2. On 2 cores a fresh clone builds and tests in about 9 minutes this way (516 s);
# with CXX=g++ in about 12 (695 s; docs/performance.md, "The developer loop"). CI runs both compilers.
# Where ccache is installed, meson uses it, and a rebuild of unchanged files is a cache hit.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=tools/deps.sh
source tools/deps.sh
packages=(meson ninja-build g++ libboost-dev doctest-dev cmake pkg-config libopenblas-dev libboost-context-dev
  libopenmpi-dev openmpi-bin)
build=${GRADIX_BUILD_DIR:-build}
if [ -z "${CXX:-}" ] && [ ! -f "$build/build.ninja" ]; then
  packages+=(clang-16)
  export CXX=clang++-16
fi
gradix_need_packages "${packages[@]}" || exit 1

quick=
if [ "${1:-}" = --quick ]; then
  quick=1
  shift
fi
setup_args=()
read -r -a setup_args <<<"${GRADIX_SETUP_OPTIONS:-}"
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
else
  # A build directory set up earlier (by tools/example.sh, say, before the packages above
  # were installed) may lack suites this machine can run now: reconfigure it, saying why.
  # (First let ninja regenerate it if a meson.build changed: that writes the record too.)
  ninja -C "$build" build.ninja >/dev/null || true
  mapfile -t stale < <(gradix_stale_features "$build")
  if [ ${#stale[@]} -gt 0 ]; then
    echo "gradix: $build was configured without what is available now; reconfiguring it for:" >&2
    printf 'gradix:   %s\n' "${stale[@]}" >&2
    extra=()
    for s in "${stale[@]}"; do
      [ "${s%% *}" = tests ] && extra+=(-Dtests=true)
    done
    meson setup --reconfigure "$build" "${extra[@]}" "${setup_args[@]}"
  elif [ ${#setup_args[@]} -gt 0 ]; then
    meson configure "$build" "${setup_args[@]}"
  fi
fi

targets=()
if [ -n "$quick" ]; then
  # the targets the quick suite's tests depend on, from meson's introspection (regenerated
  # first when a meson.build changed)
  ninja -C "$build" build.ninja >/dev/null
  mapfile -t targets < <(python3 - "$build" <<'PY'
import json, pathlib, sys
info = pathlib.Path(sys.argv[1]) / "meson-info"
tests = json.loads((info / "intro-tests.json").read_text())
targets = {t["id"]: t for t in json.loads((info / "intro-targets.json").read_text())}
names = set()
for t in tests:
    if any(s.split(":")[-1] == "quick" for s in t["suite"]):
        for d in t["depends"]:
            if d in targets:
                names.add(targets[d]["name"])
print("\n".join(sorted(names)))
PY
  )
  if [ ${#targets[@]} -eq 0 ]; then
    echo "gradix: no test of the suite quick in $build" >&2
    python3 tools/testlog_summary.py --failed 1
    exit 1
  fi
  test_args=(--no-rebuild --suite quick "${test_args[@]}")
fi

if ! meson compile -C "$build" "${targets[@]}"; then
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
