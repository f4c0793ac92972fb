#!/usr/bin/env bash
# Builds and runs the README's main example: bash tools/example.sh [ARG...]
# (the arguments go to the example). GRADIX_BUILD_DIR picks the build directory (default: build).
set -euo pipefail

example=seed_embedding

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=tools/deps.sh
source tools/deps.sh
gradix_need_packages meson ninja-build g++ libboost-dev doctest-dev cmake pkg-config libopenblas-dev || exit 1

build=${GRADIX_BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
  if [ -f "$build/meson-private/coredata.dat" ]; then
    meson setup --reconfigure "$build"
  else
    meson setup "$build"
  fi
fi
meson compile -C "$build" "examples/$example"
exec "$build/examples/$example" "$@"
