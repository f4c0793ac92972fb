#!/usr/bin/env bash
# Plain-include check: runs the README's plain-include commands (the ```sh block under
# `<!-- commands: tests/install/check_plain.sh runs these -->`) with <gradix> the source tree,
# prog.cpp tests/install/install_user.cpp (and examples/quickstart.cpp), c++ the compiler,
# plus warnings as errors and -O1, and runs what they build. A README line that stops
# building fails here. The lines without OpenBLAS must build; those that name openblas run
# where openblas.pc exists. (Boost's headers come from the system's include path, where
# libboost-dev puts them.)
#
#   bash tests/install/check_plain.sh          (CXX picks the compiler; default c++)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cxx=${CXX:-c++}
warn=(-Wall -Wextra -Wpedantic -Werror -O1)

# The README's block, line by line (comments and blank lines dropped).
mapfile -t lines < <(awk '
  /<!-- commands: tests\/install\/check_plain.sh runs these -->/ { want = 1; next }
  want && /^ *```sh/ { inside = 1; next }
  inside && /^ *```/ { exit }
  inside { sub(/^ +/, ""); if ($0 != "" && $0 !~ /^#/) print }' "$root/README.md")
if [ ${#lines[@]} -eq 0 ]; then
  echo "check_plain: README.md has no plain-include block under its marker" >&2
  exit 1
fi

cd "$tmp"
n=0
for line in "${lines[@]}"; do
  case "$line" in
    "c++ "*prog.cpp*) ;;
    *) echo "check_plain: README line is not 'c++ ... prog.cpp ...': $line" >&2; exit 1 ;;
  esac
  if [[ $line == *openblas* ]] && ! pkg-config --exists openblas; then
    echo "plain -I: skipped (no openblas.pc): $line"
    continue
  fi
  for prog in "$here/install_user.cpp" "$root/examples/quickstart.cpp"; do
    n=$((n + 1))
    cmd=${line#c++ }
    cmd=${cmd//<gradix>/$root}
    cmd=${cmd//prog.cpp/$prog}
    # the line's own words, with $(pkg-config ...) expanded as a shell would
    eval "\"\$cxx\" $cmd ${warn[*]} -o prog$n"
    "./prog$n" >/dev/null
    echo "plain -I: ok: $line ($(basename "$prog"))"
  done
done
