#!/usr/bin/env bash
# The founding benchmark with sharded tables, small, on 1, 2, 3 and 4 ranks with --check (test
# seed_shards), for both losses and both placements: each run's gradients and loss must pass
# the plain-loop check, and the loss must have the same bits at every rank count.
# usage: seed_shards.sh MPIRUN SEED_EMBEDDING_DIST
set -euo pipefail
mpirun=$1
exe=$2
small=(--na 20000 --nb 7000 --k 700 --n 12 --block 3 --reps 2 --check)
for variant in "--loss sum --placement block" "--loss square --placement modulo --idx-mod 97"; do
  first=
  for np in 1 2 3 4; do
    # shellcheck disable=SC2086
    out=$("$mpirun" -np "$np" "$exe" "${small[@]}" $variant)
    echo "$out" | grep -q '^check: .*all ranks: ok$' || { echo "$out" >&2; echo "seed_shards: $np ranks, $variant: check failed" >&2; exit 1; }
    bits=$(echo "$out" | sed -n 's/.*"loss_bits": "\([^"]*\)".*/\1/p')
    echo "$variant, $np ranks: $(echo "$out" | grep '^sent per step')"
    [ -n "$first" ] || first=$bits
    [ "$bits" = "$first" ] || { echo "seed_shards: $np ranks, $variant: loss bits $bits, 1 rank had $first" >&2; exit 1; }
  done
done
echo "seed_shards: the same loss bits at 1-4 ranks; gradients checked"
