#!/usr/bin/env bash
# Subproject check: a copy of tests/install/subproject_user in a temporary directory, with
# subprojects/gradix a symbolic link to this repository (no wrap file), configured with
# --force-fallback-for=gradix, built and tested.
#
#   bash tests/install/check_subproject.sh        (CXX picks the compiler, as for meson)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cp -R "$here/subproject_user" "$tmp/user"
mkdir -p "$tmp/user/subprojects"
ln -s "$root" "$tmp/user/subprojects/gradix"

meson setup "$tmp/build" "$tmp/user" --force-fallback-for=gradix
meson compile -C "$tmp/build"
meson test -C "$tmp/build" --print-errorlogs
