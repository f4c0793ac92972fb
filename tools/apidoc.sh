#!/usr/bin/env bash
# Builds the API reference (HTML) from the /// comments with Doxygen (tools/Doxyfile), into
# OUT_DIR (default: build/apidoc). Any Doxygen warning fails it (CI's stage apidoc).
#
#   bash tools/apidoc.sh [OUT_DIR]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=tools/deps.sh
source tools/deps.sh
gradix_need_packages doxygen || exit 1

out=${1:-build/apidoc}
mkdir -p "$out"
out=$(cd "$out" && pwd)
log=$out/warnings.txt
rm -f "$log"
status=0
{ cat tools/Doxyfile; echo "OUTPUT_DIRECTORY = $out"; echo "WARN_LOGFILE = $log"; } | doxygen - || status=$?
if [ -s "$log" ]; then
  cat "$log" >&2
  echo "apidoc: Doxygen warned ($(wc -l <"$log") lines); fix the /// comments above" >&2
  exit 1
fi
[ "$status" -eq 0 ] || { echo "apidoc: doxygen failed (exit status $status)" >&2; exit "$status"; }
echo "apidoc: $out/html/index.html ($(find "$out/html" -name '*.html' | wc -l) pages, no warnings)"
