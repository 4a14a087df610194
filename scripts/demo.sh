#!/usr/bin/env bash
# The README's demo: set up, build the CLI (not the tests), then what attnmt is for, on the shipped corpus: train the
# model without attention (the fixed-context bottleneck) and the Bahdanau model side by side, one core each, each
# until its validation BLEU stops improving (early stopping, patience 3 from the configs; no epoch cap) or MINUTES/2
# minutes pass, whichever comes first (the log and the table say which), evaluate both on the test set (beam 5, BLEU
# by source length), write the Bahdanau model's attention maps, compare the two, and print the side-by-side table and
# where every result was written. MINUTES (default 12): the two models' training time together, as when they trained
# one after the other; a CUDA machine trains on the GPU (device auto).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
TARGETS=attnmt bash scripts/build.sh
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

# Side by side, one core each (one BLAS thread, one LibTorch thread): on 2 cores the pair ends sooner than the two
# one after the other with two threads each; each line says which model it is from.
echo "== training configs/none.json and configs/bahdanau.json side by side until validation stops improving (at most $EACH minutes each)"
pids=()
for model in none bahdanau; do
  (set -o pipefail; $BIN --threads 1 train --config "configs/$model.json" --set run_dir="$OUT/$model" \
     --set train.max_minutes="$EACH" --set train.epochs=100000 --overwrite 2>&1 | sed -u "s/^/[$model] /") &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { kill "${pids[@]}" 2>/dev/null; echo "demo: a training failed" >&2; exit 1; }; done
echo "== evaluating both on data/toy/test (beam 5)"
pids=()
for model in none bahdanau; do
  $BIN --threads 1 evaluate --run "$OUT/$model" --beam 5 >"$OUT/$model.evaluate.txt" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { cat "$OUT"/*.evaluate.txt >&2; exit 1; }; done
for model in none bahdanau; do echo "-- $model"; cat "$OUT/$model.evaluate.txt"; done

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
