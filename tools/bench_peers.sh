#!/usr/bin/env bash
# The founding benchmark (docs/performance.md, DESIGN.md section 1) side by side in one run:
# gradix per term and batched, the hand-written C++ loop (bench/seed_compare.cpp, built with
# g++ and with clang++-16) and the PyTorch peer script seed_torch.py (1 thread, glibc huge-page
# malloc, its best configuration here). Prints every raw JSON summary, then a Markdown table
# for docs/performance.md: forward and backward ms at n = 100, peak RSS, and PyTorch's best
# backward over each row's backward.
#
#   tools/bench_peers.sh                  # full size: about 5-10 minutes (estimate), mostly the
#                                         # slow PyTorch variants; run it on a quiet machine
#   tools/bench_peers.sh --skip-slow      # PyTorch: only `manual` and `emb_sparse` (about 2 min)
#   tools/bench_peers.sh --quick          # small sizes (smoke test: ~30 s, plus ~1 min to build)
#   tools/bench_peers.sh > table.md       # progress goes to stderr, the report to stdout
#
# Options:
#   --reps N        repetitions of the C++ programs (default 7; medians)
#   --torch-reps N  repetitions of each PyTorch variant, after 1 warm-up (default 3; medians)
#   --slow-n N      terms for the slow PyTorch variants dense, index_select, emb_dense, jit
#                   (default 10; their times are scaled to the full n, and the table says so)
#   --layout L      col (default) or row: the gradix / hand tables' layout. PyTorch's tables are
#                   row-major with row gathers, the same memory as col-major column gathers.
#   --quick         Ea 64 x 100,000, Eb 64 x 8,192, k = 1000, n = 10 (seed_torch.py --size quick)
#   --skip-slow     leave out the slow PyTorch variants
#   --no-hugepages  run PyTorch without GLIBC_TUNABLES=glibc.malloc.hugetlb=1
#
# Environment:
#   GRADIX_PEERS_DIR  folder holding seed_torch.py (default: ../shared/peers, relative to the
#                     repository root: the design notes' peers folder)
#   PYTHON            interpreter with torch (default /usr/bin/python3, Debian's python3-torch)
#   GCC, CLANG        C++ compilers (default g++ and clang++-16)
#   GRADIX_PEERS_BUILD  build folder (default build-peers, covered by .gitignore's /build*/)
#
# The C++ programs are built with -std=c++20 -O3 -march=native -DNDEBUG -Wno-psabi -pthread
# (meson's release build of bench/ and examples/), and rebuilt when a header or source is
# newer than the binary. Each program's full output goes to <build>/logs/.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

reps=7 torch_reps=3 slow_n=10 layout=col quick=0 skip_slow=0 hugepages=1
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --torch-reps) torch_reps=$2; shift 2 ;;
    --slow-n) slow_n=$2; shift 2 ;;
    --layout) layout=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --skip-slow) skip_slow=1; shift ;;
    --no-hugepages) hugepages=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_peers.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $layout in col|row) ;; *) echo "bench_peers.sh: --layout must be col or row" >&2; exit 2 ;; esac
for v in "$reps" "$torch_reps" "$slow_n"; do
  [[ $v =~ ^[1-9][0-9]*$ ]] || { echo "bench_peers.sh: counts must be positive integers" >&2; exit 2; }
done

peers=${GRADIX_PEERS_DIR:-../shared/peers}
python=${PYTHON:-/usr/bin/python3}
gcc=${GCC:-g++}
clang=${CLANG:-clang++-16}
build=${GRADIX_PEERS_BUILD:-build-peers}

# ------------------------------------------------------------------ prerequisites
peer_script=$peers/seed_torch.py
if [ ! -f "$peer_script" ]; then
  echo "bench_peers.sh: the PyTorch peer script is missing: no $peer_script" >&2
  echo "  (set GRADIX_PEERS_DIR to the folder holding seed_torch.py; the default" >&2
  echo "  ../shared/peers is taken relative to the repository root)" >&2
  exit 1
fi
if ! command -v "$python" >/dev/null 2>&1; then
  echo "bench_peers.sh: no Python interpreter $python (set PYTHON)" >&2
  exit 1
fi
if ! "$python" -c 'import torch' >/dev/null 2>&1; then
  echo "bench_peers.sh: $python cannot import torch: install PyTorch" >&2
  echo "  (Debian: apt-get install -y python3-torch, then use PYTHON=/usr/bin/python3)" >&2
  exit 1
fi
for cxx in "$gcc" "$clang"; do
  command -v "$cxx" >/dev/null 2>&1 || { echo "bench_peers.sh: no C++ compiler $cxx (set GCC / CLANG)" >&2; exit 1; }
done
command -v python3 >/dev/null 2>&1 || { echo "bench_peers.sh: python3 is needed for tools/bench_table.py" >&2; exit 1; }

# ------------------------------------------------------------------ sizes
if [ "$quick" = 1 ]; then
  na=100000 nb=8192 k=1000 n=10
else
  na=1000000 nb=65535 k=5000 n=100
fi
[ "$slow_n" -gt "$n" ] && slow_n=$n
cxx_size=(--na "$na" --nb "$nb" --k "$k" --n "$n")
torch_size=(--na "$na" --nb "$nb" --k "$k" --d 64)

logs=$build/logs
mkdir -p "$logs"
manifest=$logs/manifest.tsv
: >"$manifest"
started=$(date +%s)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# ------------------------------------------------------------------ build
flags=(-std=c++20 -O3 -march=native -DNDEBUG -Wno-psabi -Iinclude -pthread)
build_one() {  # build_one <compiler> <source> <binary>
  local cxx=$1 src=$2 bin=$3
  if [ -x "$bin" ] && [ -z "$(find include "$src" -newer "$bin" -print -quit)" ]; then
    return 0
  fi
  echo "== $cxx ${flags[*]} $src -o $bin" >&2
  if ! "$cxx" "${flags[@]}" "$src" -o "$bin.tmp"; then
    rm -f "$bin.tmp"
    echo "bench_peers.sh: building $src with $cxx failed" >&2
    exit 1
  fi
  mv "$bin.tmp" "$bin"
}
compilers=()
for pair in "gcc:$gcc" "clang:$clang"; do
  name=${pair%%:*} cxx=${pair#*:}
  mkdir -p "$build/$name"
  build_one "$cxx" bench/seed_compare.cpp "$build/$name/seed_compare"
  build_one "$cxx" examples/seed_embedding.cpp "$build/$name/seed_embedding"
  version=$("$cxx" -dumpfullversion 2>/dev/null || "$cxx" -dumpversion)
  compilers+=("$name:$(basename "$cxx") $version")
done

# ------------------------------------------------------------------ run
# record <kind> <tag> <scale> <log>: one manifest line per run (read by tools/bench_table.py)
record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$manifest"; }

for c in "${compilers[@]}"; do
  name=${c%%:*} label=${c#*:}
  bin=$build/$name
  for run in compare embedding batched; do
    case $run in
      compare) cmd=("$bin/seed_compare" --layout "$layout" --reps "$reps" "${cxx_size[@]}") ;;
      embedding) cmd=("$bin/seed_embedding" --layout "$layout" --reps "$reps" --threads 1 "${cxx_size[@]}") ;;
      batched) cmd=("$bin/seed_embedding" --batched --layout "$layout" --reps "$reps" --threads 1 "${cxx_size[@]}") ;;
    esac
    log=$logs/$name-$run.txt
    echo "== ${cmd[*]}" >&2
    if ! "${cmd[@]}" >"$log" 2>&1; then
      cat "$log" >&2
      echo "bench_peers.sh: ${cmd[*]} failed (output in $log)" >&2
      exit 1
    fi
    record "cxx-$run" "$label" 1 "$log"
  done
done

variants=(manual emb_sparse)
[ "$skip_slow" = 1 ] || variants+=(dense index_select emb_dense jit)
env_hp=()
[ "$hugepages" = 1 ] && env_hp=(GLIBC_TUNABLES=glibc.malloc.hugetlb=1)
for v in "${variants[@]}"; do
  vn=$n
  case $v in dense|index_select|emb_dense|jit) vn=$slow_n ;; esac
  scale=$(python3 -c "print($n / $vn)")
  cmd=(env "${env_hp[@]}" "$python" "$peer_script" --variant "$v" --threads 1 --reps "$torch_reps"
       "${torch_size[@]}" -n "$vn")
  log=$logs/torch-$v.txt
  echo "== ${cmd[*]}" >&2
  if ! "${cmd[@]}" >"$log" 2>&1; then
    tail -n 5 "$log" >&2
    echo "bench_peers.sh: warning: PyTorch variant $v failed (output in $log); the table marks it" >&2
  fi
  record torch "$v$([ "$hugepages" = 1 ] && echo ":hugetlb")" "$scale" "$log"
done

load_after=$(cut -d' ' -f1-3 /proc/loadavg)
elapsed=$(($(date +%s) - started))
echo >&2
python3 tools/bench_table.py "$manifest" --n "$n" --na "$na" --nb "$nb" --k "$k" --layout "$layout" \
  --reps "$reps" --torch-reps "$torch_reps" --load "$load_before" "$load_after" \
  --elapsed "$elapsed" --nproc "$(nproc)"
