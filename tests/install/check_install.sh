#!/usr/bin/env bash
# Install check: `meson install --destdir` from a configured and built BUILD_DIR into a
# temporary directory, then
#   - compile tests/install/install_user.cpp with only the flags of the installed pkg-config
#     file (its include path mapped into the destdir);
#   - configure and build tests/install/cmake_user with CMake against the installed
#     gradixConfig.cmake (CMAKE_PREFIX_PATH at the destdir's prefix), and check that a
#     request for another MINOR version (0.x) is refused;
#   - check that README, CHANGELOG, LICENSE, docs/ and examples/ are under share/doc/gradix.
#
#   bash tests/install/check_install.sh BUILD_DIR      (CXX picks the compiler; default c++)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: check_install.sh BUILD_DIR}" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest

meson install -C "$build" --no-rebuild --quiet --destdir "$dest"

pc=$(find "$dest" -name gradix.pc -print -quit)
if [ -z "$pc" ]; then
  echo "check_install: no gradix.pc was installed" >&2
  exit 1
fi
inc=$(find "$dest" -type d -path '*/include/gradix' -print -quit)
if [ -z "$inc" ]; then
  echo "check_install: no include/gradix directory was installed" >&2
  exit 1
fi
# Every header of the source tree is installed (and nothing else).
if ! diff <(cd "$root/include/gradix" && find . -type f | sort) \
          <(cd "$inc" && find . -type f | sort); then
  echo "check_install: the installed headers differ from include/gradix (< source, > installed)" >&2
  exit 1
fi

# The installed .pc file comes first (gradix is found there only); the packages it requires
# (openblas, when gradix was built with it) are the system's. gradix's own include path is
# then mapped into the destdir (as PKG_CONFIG_SYSROOT_DIR would, which would map the
# required packages' paths too).
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_LIBDIR
incdir=$(pkg-config --variable=includedir gradix)
read -r -a cflags <<<"$(pkg-config --cflags gradix)"
read -r -a libs <<<"$(pkg-config --libs gradix)"
for i in "${!cflags[@]}"; do
  if [ "${cflags[$i]}" = "-I$incdir" ]; then cflags[$i]="-I$dest$incdir"; fi
done
case " ${cflags[*]} " in
  *" -I$dest/"*) ;;
  *)
    echo "check_install: pkg-config --cflags gradix gives '${cflags[*]}', not a path in the destdir" >&2
    exit 1
    ;;
esac
echo "pkg-config gradix: ${cflags[*]} ${libs[*]}"

cd "$tmp"  # no -I of the source tree, and not its include/ by accident either
"${CXX:-c++}" "${cflags[@]}" -Wall -Wextra -Wpedantic -Werror -O1 \
  "$here/install_user.cpp" "${libs[@]}" -o "$tmp/install_user"
"$tmp/install_user"

echo "pkg-config consumer: ok"

# CMake: find_package(gradix) from the destdir (the config file finds the headers relative
# to itself, so the destdir needs no mapping).
cfg=$(find "$dest" -name gradixConfig.cmake -print -quit)
if [ -z "$cfg" ] || [ ! -f "$(dirname "$cfg")/gradixConfigVersion.cmake" ]; then
  echo "check_install: no gradixConfig.cmake and gradixConfigVersion.cmake were installed" >&2
  exit 1
fi
prefix=$(meson introspect "$build" --buildoptions |
  python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
cmake_prefix=$dest$prefix  # CMake searches <prefix>/<libdir>/cmake/gradix itself
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
cmake -S "$here/cmake_user" -B "$tmp/cmake-build" "${generator[@]}" -DCMAKE_CXX_COMPILER="${CXX:-c++}" \
  -DCMAKE_PREFIX_PATH="$cmake_prefix" -DCMAKE_BUILD_TYPE=Release >"$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log" >&2; echo "check_install: cmake could not configure tests/install/cmake_user" >&2; exit 1; }
grep -q "gradix" "$tmp/cmake-build/CMakeCache.txt"
found=$(sed -n 's/^gradix_DIR:PATH=//p' "$tmp/cmake-build/CMakeCache.txt")
case "$found" in
  "$dest"/*) echo "cmake found gradix at $found" ;;
  *)
    echo "check_install: cmake found gradix at '$found', not in the destdir" >&2
    exit 1
    ;;
esac
cmake --build "$tmp/cmake-build" >"$tmp/cmake-build.log" 2>&1 ||
  { cat "$tmp/cmake-build.log" >&2; echo "check_install: the CMake consumer did not build" >&2; exit 1; }
"$tmp/cmake-build/prog"
# another MINOR version while MAJOR is 0 (and a newer one) must be refused
for wanted in 0.99 1.0; do
  if cmake -S "$here/cmake_user" -B "$tmp/cmake-refused-$wanted" "${generator[@]}" -DCMAKE_CXX_COMPILER="${CXX:-c++}" \
       -DCMAKE_PREFIX_PATH="$cmake_prefix" -DGRADIX_WANTED="$wanted" >"$tmp/refused.log" 2>&1; then
    echo "check_install: find_package(gradix $wanted) accepted the installed $(sed -n 's/^set(PACKAGE_VERSION "\(.*\)")$/\1/p' "$(dirname "$cfg")/gradixConfigVersion.cmake")" >&2
    exit 1
  fi
  if ! grep -q "considered but not accepted" "$tmp/refused.log"; then
    cat "$tmp/refused.log" >&2
    echo "check_install: find_package(gradix $wanted) failed, but not for its version" >&2
    exit 1
  fi
done
echo "CMake consumer: ok (other versions refused)"

# Documentation where distributions put it.
doc=$(find "$dest" -type d -path '*/share/doc/gradix' -print -quit)
for f in README.md CHANGELOG.md LICENSE docs/cuda.md docs/ops.md examples/quickstart.cpp examples/seed_embedding.cpp; do
  if [ -z "$doc" ] || [ ! -f "$doc/$f" ]; then
    echo "check_install: share/doc/gradix/$f was not installed" >&2
    exit 1
  fi
done
echo "docs and examples: ok ($doc)"
