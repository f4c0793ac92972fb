# shellcheck shell=bash
# Shared helper for tools/*.sh and .ci/run (source it; it defines functions only).
#
#   gradix_need_packages PKG...   makes sure the Debian packages are installed. As root it
#                                 installs the missing ones (apt-get update once per process
#                                 tree, then apt-get install); otherwise it prints one line
#                                 with the command to run and returns 1.

# Prints the packages among "$@" that are not installed (dpkg's view).
gradix_missing_packages() {
  local p status
  for p in "$@"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [ "$status" = installed ] || printf '%s\n' "$p"
  done
}

gradix_need_packages() {
  local missing
  if ! command -v dpkg-query >/dev/null 2>&1; then
    # Not a Debian-like system: check the commands the build runs and hope for the rest.
    local c cmds=()
    for c in meson ninja c++ pkg-config cmake python3; do
      command -v "$c" >/dev/null 2>&1 || cmds+=("$c")
    done
    if [ ${#cmds[@]} -gt 0 ]; then
      echo "gradix: missing programs (install them with your package manager): ${cmds[*]}" >&2
      return 1
    fi
    return 0
  fi
  mapfile -t missing < <(gradix_missing_packages "$@")
  [ ${#missing[@]} -eq 0 ] && return 0
  # --no-install-recommends: clang-16 recommends libomp-16-dev, which conflicts with a
  # preinstalled libomp-14-dev.
  local apt_opts=(-y --no-install-recommends -o DPkg::Lock::Timeout=600)
  if [ "$(id -u)" -ne 0 ]; then
    echo "gradix: missing Debian packages; install them with: sudo apt-get install ${apt_opts[*]} ${missing[*]}" >&2
    return 1
  fi
  echo "gradix: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  if [ -z "${GRADIX_APT_UPDATED:-}" ]; then
    apt-get -o DPkg::Lock::Timeout=600 update -q || return 1
    export GRADIX_APT_UPDATED=1
  fi
  apt-get install -q "${apt_opts[@]}" "${missing[@]}" || return 1
}

# Prints, one per line, the optional features that build directory $1 was configured
# without although their option allows them and what they need is installed now (meson
# wrote what it found to $1/gradix-features.txt; see meson.build), and "tests" when the
# directory was set up with -Dtests=false. Prints "(no record)" when the file is missing (a
# directory set up by an older gradix, or a failed setup).
gradix_stale_features() {
  local dir=$1 name allowed found
  local record=$dir/gradix-features.txt
  if [ ! -f "$record" ]; then
    echo "(no record of its optional features: set up by an older gradix, or its setup failed)"
    return 0
  fi
  while read -r name allowed found; do
    case $name in '' | '#'*) continue ;; esac
    if [ "$name" = tests ]; then
      [ "$found" = yes ] || echo "tests (the directory was set up with -Dtests=false)"
      continue
    fi
    [ "$allowed" = yes ] && [ "$found" = no ] || continue
    case $name in
      blas) [ -z "$(gradix_missing_packages libopenblas-dev)" ] && echo "blas (OpenBLAS: libopenblas-dev)" ;;
      emulator) [ -z "$(gradix_missing_packages libboost-context-dev)" ] && echo "emulator (the grid emulator: libboost-context-dev)" ;;
      mpi) [ -z "$(gradix_missing_packages libopenmpi-dev openmpi-bin)" ] && echo "mpi (libopenmpi-dev, openmpi-bin)" ;;
      cuda) command -v nvcc >/dev/null 2>&1 && echo "cuda (nvcc is on PATH)" ;;
    esac
  done <"$record"
  return 0
}
