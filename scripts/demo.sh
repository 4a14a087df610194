#!/usr/bin/env bash
# The README's demo: set up, build, then what attnmt is for, on the shipped corpus: train the model without
# attention (the fixed-context bottleneck) and the Bahdanau model, each until its validation BLEU stops improving
# (early stopping, patience 3 from the configs; no epoch cap) or its half of the time budget is spent, whichever
# comes first (the log and the table say which), evaluate both on the test set (beam 5, BLEU by source length),
# write the Bahdanau model's attention maps, compare the two, and print the side-by-side table and where every
# result was written. MINUTES (default 12) is the training time of both together; a CUDA machine trains on the
# GPU (device auto).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BIN=build/attnmt
OUT=${OUT:-runs/demo}
MINUTES=${MINUTES:-12}
EACH=$(awk "BEGIN { print $MINUTES / 2 }")
mkdir -p "$OUT"

echo "== regenerating the shipped corpus into $OUT/corpus (must equal data/toy)"
$BIN corpus --out "$OUT/corpus"
for f in train.en train.fr train.align test.en test.fr test.align; do
  cmp -s "$OUT/corpus/$f" "data/toy/$f" || { echo "corpus: $f differs from data/toy" >&2; exit 1; }
done
echo "corpus: identical to data/toy"

for model in none bahdanau; do
  echo "== training configs/$model.json until validation stops improving (at most $EACH minutes)"
  $BIN train --config "configs/$model.json" --set run_dir="$OUT/$model" --set train.max_minutes="$EACH" \
    --set train.epochs=100000 --overwrite
  echo "== evaluating $model on data/toy/test (beam 5)"
  $BIN evaluate --run "$OUT/$model" --beam 5
done

echo "== attention maps of the Bahdanau model for the first 12 test sentences"
$BIN attention --run "$OUT/bahdanau" --src data/toy/test.en --ref data/toy/test.fr --align data/toy/test.align \
  --out "$OUT/bahdanau/maps" --limit 12

echo "== comparing: test BLEU by source length (words)"
$BIN compare "$OUT/none" "$OUT/bahdanau" --out "$OUT/report"

echo
echo "Results:"
echo "  report:      $OUT/report/index.html (BLEU by length chart, table; report.md, report.json)"
echo "  runs:        $OUT/none/ and $OUT/bahdanau/ (config.json, vocabularies, best.pt, last.pt, train.log,"
echo "               metrics.jsonl, curves.svg, eval/test.json, eval/test.hyp)"
echo "  training:    $OUT/bahdanau/progress/index.html (attention on two validation sentences at every validation)"
echo "  maps:        $OUT/bahdanau/maps/index.html (and NNNN.{svg,json,csv})"
echo "  corpus:      $OUT/corpus/{train,valid,test}.{en,fr,align}"
