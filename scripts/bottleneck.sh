#!/usr/bin/env bash
# The bottleneck demonstration: trains the attention-free model, three attention models and a self-attention
# encoder-decoder (configs/self_attention.json, scaled dot-product cross-attention) on
# data/toy with identical data, sizes, budget and seed, each until its validation BLEU stops improving
# (early stopping, patience 3 from the configs; no epoch cap) or MINUTES of training are spent, whichever
# comes first (train.json and the report say which); evaluates each with beam 5; writes attention
# maps for a fixed set of long test sentences; compares them (BLEU by source length).
# Resumable: finished runs are skipped, an interrupted one continues from its last checkpoint.
# Usage: scripts/bottleneck.sh [OUT_DIR]   (default runs/bottleneck; MINUTES=4 per model by default)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/bottleneck}
MINUTES=${MINUTES:-4}
BIN=${BIN:-build/attnmt}
[ -x "$BIN" ] || bash scripts/build.sh
mkdir -p "$OUT"
start=$(date +%s)

# A fixed set of long test sentences (45+ source tokens) for the attention maps.
awk 'NF >= 45 { print NR }' data/toy/test.en | head -n 6 > "$OUT/long.lines"
for ext in en fr align; do
  awk 'NR == FNR { keep[$1] = 1; next } keep[FNR]' "$OUT/long.lines" "data/toy/test.$ext" > "$OUT/long.$ext"
done

run_one() {  # name config extra-set...
  local name=$1 config=$2
  shift 2
  local dir="$OUT/$name"
  if [ -f "$dir/eval/test.json" ] && { [ "$name" = none ] || [ -f "$dir/maps/index.html" ]; }; then
    echo "== $name: already done, skipping"
    return
  fi
  local mode=--overwrite
  [ -f "$dir/last.pt" ] && mode=--resume
  echo "== $name: training ($mode)"
  $BIN train --config "$config" --set run_dir="$dir" --set train.epochs=100000 --set train.max_minutes="$MINUTES" "$@" $mode
  echo "== $name: evaluating (beam 5)"
  $BIN evaluate --run "$dir" --beam 5
  if [ "$name" != none ]; then  # the attention-free model has no weights to draw
    $BIN attention --run "$dir" --src "$OUT/long.en" --ref "$OUT/long.fr" --align "$OUT/long.align" --out "$dir/maps"
  fi
}

run_one none configs/none.json
run_one bahdanau configs/bahdanau.json
run_one luong configs/luong_general.json --set model.input_feeding=true
run_one scaled_dot configs/scaled_dot.json
run_one self_attention configs/self_attention.json

$BIN compare "$OUT/none" "$OUT/bahdanau" "$OUT/luong" "$OUT/scaled_dot" "$OUT/self_attention" --out "$OUT/report"
echo
echo "bottleneck: done in $(( ($(date +%s) - start) / 60 )) min"
echo "report: $OUT/report/report.md and $OUT/report/index.html (chart: $OUT/report/bleu_by_length.svg)"
