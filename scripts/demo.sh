#!/usr/bin/env bash
# The README's demo: set up, build, then the main job on the shipped corpus: check the corpus
# generator, train the Bahdanau model (time-boxed), and print where every result was written.
# Evaluation and attention maps join here as `evaluate` and `attention` land.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BIN=build/attnmt
OUT=${OUT:-runs/demo}
MINUTES=${MINUTES:-8}
mkdir -p "$OUT"

echo "== regenerating the shipped corpus into $OUT/corpus (must equal data/toy)"
$BIN corpus --out "$OUT/corpus"
for f in train.en train.fr train.align test.en test.fr test.align; do
  cmp -s "$OUT/corpus/$f" "data/toy/$f" || { echo "corpus: $f differs from data/toy" >&2; exit 1; }
done
echo "corpus: identical to data/toy"

echo "== training configs/bahdanau.json for at most $MINUTES minutes"
$BIN train --config configs/bahdanau.json --set run_dir="$OUT/bahdanau" --set train.max_minutes="$MINUTES" --overwrite

echo
echo "Results:"
echo "  corpus:      $OUT/corpus/{train,valid,test}.{en,fr,align}"
echo "  run:         $OUT/bahdanau/ (config.json, src.vocab, tgt.vocab, best.pt, last.pt)"
echo "  metrics:     $OUT/bahdanau/metrics.jsonl"
tail -n 1 "$OUT/bahdanau/metrics.jsonl"
