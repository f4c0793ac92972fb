#!/usr/bin/env bash
# Plain-include check: compile tests/install/install_user.cpp and examples/quickstart.cpp
# straight from the source tree with the flag list the README documents, and nothing else:
#
#   c++ -std=c++20 -I<gradix>/include -pthread prog.cpp                 (gradix's own loops)
#   c++ -std=c++20 -I<gradix>/include -pthread -DGRADIX_USE_OPENBLAS=1 \
#       $(pkg-config --cflags --libs openblas) prog.cpp                (OpenBLAS's gemm)
#
# (Boost's headers are found in the system's include path, where libboost-dev puts them.)
#
#   bash tests/install/check_plain.sh          (CXX picks the compiler; default c++)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cxx=${CXX:-c++}
warn=(-Wall -Wextra -Wpedantic -Werror -O1)

cd "$tmp"
"$cxx" -std=c++20 -I"$root/include" -pthread "${warn[@]}" "$here/install_user.cpp" -o plain_user
./plain_user
"$cxx" -std=c++20 -I"$root/include" -pthread "${warn[@]}" "$root/examples/quickstart.cpp" -o plain_quickstart
./plain_quickstart >/dev/null
echo "plain -I: ok"
if pkg-config --exists openblas; then
  read -r -a blas <<<"$(pkg-config --cflags --libs openblas)"
  "$cxx" -std=c++20 -I"$root/include" -pthread -DGRADIX_USE_OPENBLAS=1 "${warn[@]}" "$here/install_user.cpp" \
    "${blas[@]}" -o plain_user_blas
  ./plain_user_blas
  echo "plain -I with OpenBLAS: ok"
else
  echo "plain -I with OpenBLAS: skipped (no openblas.pc)"
fi
