#!/usr/bin/env bash
# The GPU check of the CUDA backend (docs/cuda.md), in one command on a machine with a GPU:
# one meson setup, ninja with all cores (only the CUDA targets), the CUDA test suite (with
# an MLP step through cuBLAS against the emulator, tests/cuda/kernels.cu), the grid-kernel
# bandwidth benchmark, the model steps on the device (bench_cuda_models: an MLP and a text
# classifier against the host, --check; issue 33), and the founding benchmark at full size
# (per term and batched, sum and square loss, atomic and deterministic scatter, each with
# --check), then one summary table and one JSON line. Its output folder (default build-gpu/gpu_check) keeps
# every log.
#
#   bash tools/gpu_check.sh pack      # here, without a GPU: gathers what a bare GPU machine
#                                     # lacks (the Boost headers gradix and the emulator use,
#                                     # libboost_context, doctest) into .gpu/ (git-ignored)
#   bash tools/gpu_check.sh [OUTDIR]  # on the GPU machine (with .gpu/ beside it when packed)
#
# Environment: GPU_CHECK_REPS (founding benchmark repetitions, default 5), GPU_CHECK_N (terms,
# default 100), GPU_CHECK_BUILD (build folder, default build-gpu).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
pack=$root/.gpu

if [ "${1:-}" = pack ]; then
  # Headers: the Boost components that the CUDA targets' translation units include (listed
  # by the compiler), whole, so that nvcc's own configuration files come along.
  rm -rf "$pack"
  mkdir -p "$pack/include/boost" "$pack/lib/cmake"
  comps=$(g++ -std=c++20 -Iinclude -Itests -Iexamples -M tests/cuda/emulator_test.cpp \
            tests/cuda/seed_device_test.cpp examples/seed_embedding.cpp 2>/dev/null |
          tr ' \\' '\n\n' | sed -n 's|^/usr/include/boost/||p' | cut -d/ -f1 | sed 's/\.hpp$//' | sort -u)
  for c in $comps version; do
    [ -e "/usr/include/boost/$c" ] && cp -r "/usr/include/boost/$c" "$pack/include/boost/"
    [ -e "/usr/include/boost/$c.hpp" ] && cp "/usr/include/boost/$c.hpp" "$pack/include/boost/"
  done
  cp -r /usr/include/doctest "$pack/include/"
  cp -r /usr/lib/cmake/doctest "$pack/lib/cmake/"
  cp -P /usr/lib/x86_64-linux-gnu/libboost_context.so* "$pack/lib/"
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  echo "gpu_check pack: $(du -sh "$pack" | cut -f1) in .gpu/ (carry it: .gpu)"
  exit 0
fi

t_start=$(date +%s)
build=${GPU_CHECK_BUILD:-build-gpu}
out=${1:-$build/gpu_check}
reps=${GPU_CHECK_REPS:-5}
terms=${GPU_CHECK_N:-100}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if [ -d "$pack" ]; then
  export BOOST_ROOT=$pack CMAKE_PREFIX_PATH=$pack${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export CPATH=$pack/include${CPATH:+:$CPATH}
  export LD_LIBRARY_PATH=$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
command -v nvcc > /dev/null || export PATH=/usr/local/cuda/bin:$PATH
for tool in nvcc meson ninja python3; do
  command -v "$tool" > /dev/null || { echo "gpu_check: $tool not found" >&2; exit 1; }
done
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1 || true
else
  echo "no nvidia-smi (the CUDA runs below exit 77 without a device)" > "$out/gpu.txt"
fi
echo "gpu_check: $(cat "$out/gpu.txt"); nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"

# 1. build: the CUDA targets only
t0=$(date +%s)
if [ ! -f "$build/build.ninja" ]; then
  meson setup "$build" -Dcuda=enabled -Demulator=enabled -Dblas=disabled -Dbuildtype=release \
    > "$out/setup.log" 2>&1 || { tail -30 "$out/setup.log"; exit 1; }
fi
targets=(examples/seed_embedding bench/bench_cuda_kernels bench/bench_cuda_models tests/cuda/cuda_evaluators tests/cuda/cuda_kernels)
ninja -C "$build" -j "$(nproc)" "${targets[@]}" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
t_build=$(( $(date +%s) - t0 ))
echo "gpu_check: built in ${t_build} s"

# 2. the CUDA test suite (evaluators, kernels against the emulator bit for bit, seed_cuda*)
t0=$(date +%s)
set +e
meson test -C "$build" --no-rebuild --suite cuda --print-errorlogs > "$out/tests.log" 2>&1
tests_rc=$?
set -e
t_tests=$(( $(date +%s) - t0 ))
grep -E "^ *[0-9]+/[0-9]+ " "$out/tests.log" || true

# 3. grid-kernel bandwidth against the device's copy bandwidth
set +e
"$build/bench/bench_cuda_kernels" --reps 20 --check > "$out/bench_cuda_kernels.log" 2>&1
kernels_rc=$?
# 4. model steps on the device against the host (no PyTorch)
"$build/bench/bench_cuda_models" --reps 20 --check > "$out/bench_cuda_models.log" 2>&1
models_rc=$?
# 5. the founding benchmark, full size, every variant with --check
: > "$out/seed.jsonl"
seed_rc=0
for batched in "" --batched; do
  for loss in sum square; do
    for mode in "" --deterministic; do
      name="seed${batched:+_batched}_${loss}${mode:+_deterministic}"
      "$build/examples/seed_embedding" --device cuda --n "$terms" --reps "$reps" --loss "$loss" \
        $batched $mode --check > "$out/$name.log" 2>&1
      rc=$?
      [ $rc -eq 0 ] || seed_rc=$rc
      tail -1 "$out/$name.log" | grep '^{' >> "$out/seed.jsonl" || echo "gpu_check: $name failed (rc $rc): $(tail -3 "$out/$name.log")"
    done
  done
done
set -e

python3 - "$out" "$tests_rc" "$kernels_rc" "$seed_rc" "$t_build" "$t_tests" "$t_start" "$models_rc" <<'EOF'
import json, sys, time
out, tests_rc, kernels_rc, seed_rc, t_build, t_tests, t_start, models_rc = sys.argv[1:]
seed = [json.loads(l) for l in open(out + "/seed.jsonl") if l.strip()]
kern = None
for l in open(out + "/bench_cuda_kernels.log"):
    if l.startswith('{"bench":"cuda_kernels"'):
        kern = json.loads(l)
print("\n| founding benchmark (n = %s) | forward ms | backward ms | step ms | det / atomic (backward) | check |" % (seed[0]["n"] if seed else "?"))
print("| --- | ---: | ---: | ---: | ---: | --- |")
by = {(r["batched"], r["loss_kind"], r["mode"]): r for r in seed}
for r in seed:
    a = by.get((r["batched"], r["loss_kind"], "atomic"))
    ratio = r["backward_s"] / a["backward_s"] if a and a["backward_s"] > 0 else float("nan")
    print("| %s, %s, %s | %.3f | %.3f | %.3f | %.2f | %s |" % (
        "batched" if r["batched"] else "per term", r["loss_kind"], r["mode"], 1e3 * r["forward_s"],
        1e3 * r["backward_s"], 1e3 * r["step_s"], ratio, r.get("check", "-")))
summary = {"gpu_check": 1, "tests_rc": int(tests_rc), "bench_kernels_rc": int(kernels_rc), "seed_rc": int(seed_rc),
           "build_s": int(t_build), "tests_s": int(t_tests), "total_s": int(time.time()) - int(t_start), "seed": seed}
models = None
for l in open(out + "/bench_cuda_models.log"):
    if l.startswith('{"bench": "cuda_models"'):
        models = json.loads(l)
summary["models_rc"] = int(models_rc)
if models:
    print("\n| training step (zero_grad, backward, optimizer step) | host 1 thread ms | device ms |\n| --- | ---: | ---: |")
    print("| MLP 256 x 784-512-512-10 | %.3f | %.3f |" % (models["mlp_host_ms"], models["mlp_device_ms"]))
    print("| text classifier 6000 x 64, 32 bags | %.3f | %.3f |" % (models["textclf_host_ms"], models["textclf_device_ms"]))
    summary["models"] = models
if kern:
    rows = {r["name"]: r for r in kern["rows"]}
    copy = rows.get("copy (device to device)", {}).get("gbs")
    print("\n| grid kernel | ms | GB/s | of copy |\n| --- | ---: | ---: | ---: |")
    for r in kern["rows"]:
        print("| %s | %.4f | %.0f | %.2f |" % (r["name"], r["ms"], r["gbs"], r["gbs"] / copy if copy else float("nan")))
    if kern.get("calls"):
        print("\n| call (host time) | us |\n| --- | ---: |")
        for c in kern["calls"]:
            print("| %s | %.2f |" % (c["name"], c["us"]))
    summary["kernels"] = kern
    summary["scatter_of_copy"] = {n: r["gbs"] / copy for n, r in rows.items() if n.startswith("scatter") and copy}
print("\n" + json.dumps(summary, separators=(",", ":")))
EOF
[ $tests_rc -eq 0 ] && [ $kernels_rc -eq 0 ] && [ $models_rc -eq 0 ] && [ $seed_rc -eq 0 ]
