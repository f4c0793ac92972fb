#!/usr/bin/env bash
# A rank killed mid-step, and the run resumed from its last checkpoint at other rank counts
# (test dist_resume; tests/dist/dist_train.cpp is the program):
#   1. 6 steps on 1 rank, uninterrupted: the expected losses and parameters;
#   2. 3 ranks, a checkpoint after step 3, rank 1 killed by SIGKILL in the middle of step 5
#      (Open MPI's --enable-recovery keeps the others running): ranks 0 and 2 must each end
#      with a gradix::error (a collective timed out), not hang;
#   3. from that checkpoint, steps 4-6 on 2 ranks and on 4 ranks: the same losses and the
#      same parameters, to the bit, as the uninterrupted run.
# usage: resume.sh MPIRUN TEST_DIST_TRAIN
set -euo pipefail
mpirun=$1
exe=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() {
  local np=$1
  shift
  "$mpirun" -np "$np" "$@"
}
fail() {
  echo "dist_resume: $*" >&2
  exit 1
}

run 1 "$exe" --steps 6 >"$dir/full.txt"
grep -q '^params ' "$dir/full.txt" || fail "the uninterrupted run printed no digest: $(cat "$dir/full.txt")"

status=0
timeout 120 "$mpirun" --enable-recovery -np 3 "$exe" --steps 6 --ckpt "$dir/ck" --save-every 3 \
  --kill-rank 1 --kill-at 4 --timeout 5 >"$dir/killed.txt" 2>"$dir/killed.err" || status=$?
[ "$status" -ne 124 ] || fail "the run with a killed rank hung (timeout 120 s)"
cat "$dir/killed.txt"
for r in 0 2; do
  grep -q "^rank $r: gradix::error: .*timed out after 5 s on rank $r of 3" "$dir/killed.txt" ||
    fail "rank $r did not report the dead rank as a gradix::error"
done
grep -q '^saved after step 2$' "$dir/killed.txt" || fail "no checkpoint was saved before the kill"
grep -q '^params ' "$dir/killed.txt" && fail "the killed run finished"
# the checkpoint: the manifest and 3 shard files, nothing half-written
ls "$dir"
[ "$(ls "$dir" | grep -c '^ck\.shard-')" -eq 3 ] || fail "expected 3 shard files"
! ls "$dir" | grep -q '\.tmp' || fail "a temporary file was left"

for np in 2 4; do
  run "$np" "$exe" --steps 6 --ckpt "$dir/ck" --resume >"$dir/resumed$np.txt"
  grep '^loss [345] \|^params ' "$dir/full.txt" >"$dir/want.txt"
  grep '^loss \|^params ' "$dir/resumed$np.txt" >"$dir/got.txt"
  diff "$dir/want.txt" "$dir/got.txt" >&2 || fail "resumed on $np ranks: not the bits of the uninterrupted run"
  echo "dist_resume: resumed on $np ranks: steps 4-6 and the parameters have the uninterrupted run's bits"
done
