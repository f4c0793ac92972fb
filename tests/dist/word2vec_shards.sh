#!/usr/bin/env bash
# word2vec with sharded tables on 1, 2 and 4 ranks (test example_word2vec_shards): each run
# must learn (exit 0), and print the same neighbours and losses (to the bit) as the others.
# usage: word2vec_shards.sh MPIRUN WORD2VEC GLOSSES
set -euo pipefail
mpirun=$1
exe=$2
text=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for np in 1 2 4; do
  "$mpirun" -np "$np" "$exe" --shards "$np" --text "$text" --min-count 2 --epochs 5 >"$dir/out$np.txt"
  # (the traffic and the speed differ by design)
  grep -v '^rank 0 sent\|ex/s' "$dir/out$np.txt" >"$dir/cmp$np.txt"
  grep '^rank 0 sent\|^loss' "$dir/out$np.txt"
done
for np in 2 4; do
  diff "$dir/cmp1.txt" "$dir/cmp$np.txt" >&2 || { echo "word2vec: $np ranks differ from 1" >&2; exit 1; }
done
echo "word2vec_shards: 1, 2 and 4 ranks printed the same losses and neighbours"
