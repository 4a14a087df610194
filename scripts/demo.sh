#!/usr/bin/env bash
# The README's demo: set up, build, then run the main job on the shipped corpus.
# Prints where every result was written.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BIN=build/attnmt
OUT=${OUT:-runs/demo}
mkdir -p "$OUT"

echo "== regenerating the shipped corpus into $OUT/corpus (must equal data/toy)"
$BIN corpus --out "$OUT/corpus"
if cmp -s "$OUT/corpus/test.en" data/toy/test.en && cmp -s "$OUT/corpus/train.fr" data/toy/train.fr; then
  echo "corpus: identical to data/toy"
else
  echo "corpus: differs from data/toy" >&2
  exit 1
fi

echo
echo "Results:"
echo "  corpus:  $OUT/corpus/{train,valid,test}.{en,fr,align}"
