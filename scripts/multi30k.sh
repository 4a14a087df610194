#!/usr/bin/env bash
# Multi30k German->English (task 1, test2016): trains each config for at most 50 minutes
# (train.max_minutes), evaluates on test2016 with beam 5 (BLEU, chrF, BLEU by length, perplexity)
# and writes a comparison to runs/multi30k_report/.
# Usage: scripts/multi30k.sh [MODEL...]   MODEL in: none bahdanau luong scaled_dot (default: all four)
# Data: ../shared/data/multi30k/ (or scripts/fetch_multi30k.sh, then --set paths in the configs).
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=(none bahdanau luong scaled_dot)
bash scripts/setup.sh
bash scripts/build.sh
runs=()
for m in "${MODELS[@]}"; do
  cfg=configs/multi30k_$m.json
  [ -f "$cfg" ] || { echo "multi30k: no config $cfg" >&2; exit 2; }
  build/attnmt train -c "$cfg" --overwrite
  build/attnmt evaluate --run "runs/multi30k_$m" --beam 5
  runs+=("runs/multi30k_$m")
done
build/attnmt compare "${runs[@]}" -o runs/multi30k_report
echo "multi30k: report in runs/multi30k_report/report.md"
