#!/usr/bin/env bash
# Builds and runs the README's main example: bash tools/example.sh [ARG...]
# (the arguments go to the example). GRADIX_BUILD_DIR picks the build directory (default: build);
# GRADIX_SETUP_OPTIONS (e.g. "-Dgradix_werror=true") goes to `meson setup` when the script sets
# the directory up (CI's gcc stage runs this script, then tools/test.sh, as the README says).
set -euo pipefail

example=seed_embedding

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=tools/deps.sh
source tools/deps.sh
gradix_need_packages meson ninja-build g++ libboost-dev doctest-dev cmake pkg-config libopenblas-dev || exit 1

build=${GRADIX_BUILD_DIR:-build}
read -r -a setup_options <<<"${GRADIX_SETUP_OPTIONS:-}"
if [ ! -f "$build/build.ninja" ]; then
  if [ -f "$build/meson-private/coredata.dat" ]; then
    meson setup --reconfigure "$build" "${setup_options[@]}"
  else
    meson setup "$build" "${setup_options[@]}"
  fi
fi
meson compile -C "$build" "examples/$example"
exec "$build/examples/$example" "$@"
