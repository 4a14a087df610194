#!/usr/bin/env bash
# The README's demo: set up, build, then the main job on the shipped corpus: check the corpus
# generator, train the Bahdanau model (time-boxed), evaluate it on the test set (beam 5, BLEU by
# length, AER), write attention maps, and print where every result was written.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BIN=build/attnmt
OUT=${OUT:-runs/demo}
MINUTES=${MINUTES:-6}
mkdir -p "$OUT"

echo "== regenerating the shipped corpus into $OUT/corpus (must equal data/toy)"
$BIN corpus --out "$OUT/corpus"
for f in train.en train.fr train.align test.en test.fr test.align; do
  cmp -s "$OUT/corpus/$f" "data/toy/$f" || { echo "corpus: $f differs from data/toy" >&2; exit 1; }
done
echo "corpus: identical to data/toy"

echo "== training configs/bahdanau.json for at most $MINUTES minutes"
$BIN train --config configs/bahdanau.json --set run_dir="$OUT/bahdanau" --set train.max_minutes="$MINUTES" --overwrite

echo "== evaluating on data/toy/test (beam 5)"
$BIN evaluate --run "$OUT/bahdanau" --beam 5

echo "== attention maps for the first 12 test sentences"
$BIN attention --run "$OUT/bahdanau" --src data/toy/test.en --ref data/toy/test.fr --align data/toy/test.align \
  --out "$OUT/bahdanau/maps" --limit 12

echo
echo "Results:"
echo "  corpus:      $OUT/corpus/{train,valid,test}.{en,fr,align}"
echo "  run:         $OUT/bahdanau/ (config.json, src.vocab, tgt.vocab, best.pt, last.pt, train.log)"
echo "  metrics:     $OUT/bahdanau/metrics.jsonl and $OUT/bahdanau/curves.svg"
echo "  evaluation:  $OUT/bahdanau/eval/test.json and $OUT/bahdanau/eval/test.hyp"
echo "  maps:        $OUT/bahdanau/maps/index.html (and NNNN.{svg,json,csv})"
