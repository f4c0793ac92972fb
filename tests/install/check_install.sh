#!/usr/bin/env bash
# Install check: `meson install --destdir` from a configured and built BUILD_DIR into a
# temporary directory, then compile tests/install/install_user.cpp with only the flags of
# the installed pkg-config file (its include path mapped into the destdir).
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
