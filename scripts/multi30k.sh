#!/usr/bin/env bash
# Multi30k German->English (task 1, test2016): trains each config for at most 50 minutes
# (train.max_minutes), evaluates on test2016 with beam 5 (BLEU, chrF, BLEU by length, perplexity)
# and writes a comparison to runs/multi30k_report/.
# Usage: scripts/multi30k.sh [MODEL...]
#   MODEL: none bahdanau luong scaled_dot (words; the default is these four)
#          spm_none spm_bahdanau spm_scaled_dot spm_self_attention (SentencePiece pieces)
# Checkpoint: best.pt (best validation BLEU), the mean of best.pt and last.pt, or the mean of the last 5
# validation checkpoints (configs with train.keep_checkpoints), whichever scores highest on the validation set
# (beam 5); then the length penalty alpha (1.0, 1.2 or 1.4) for that checkpoint, again by validation BLEU; the test
# set is decoded once, with those choices.
# Data: ../shared/data/multi30k/ (or scripts/fetch_multi30k.sh, then --set paths in the configs).
# BIN=/path/to/attnmt uses another binary (a copy, so that the tree can be rebuilt meanwhile).
# SET="key=value ..." passes each as --set to training (e.g. SET="train.seed=2"); RUN_SUFFIX=_s2 appends to the run's
# folder (runs/multi30k_MODEL_s2), so that two runs of one config can go side by side.
# RESUME=1 continues the run already in that folder (`train --resume`, e.g. with a limit raised in SET) instead of
# starting it afresh; the same seed then gives what one uninterrupted run with those limits would have.
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=(none bahdanau luong scaled_dot)
if [ -z "${BIN:-}" ]; then
  bash scripts/setup.sh
  bash scripts/build.sh
  BIN=build/attnmt
fi
bleu_of() { sed -n 's/^  "bleu": *\([0-9.eE+-]*\),*$/\1/p' "$1"; }  # the top-level "bleu" of an eval JSON
runs=()
for m in "${MODELS[@]}"; do
  cfg=configs/multi30k_$m.json
  [ -f "$cfg" ] || { echo "multi30k: no config $cfg" >&2; exit 2; }
  run=runs/multi30k_$m${RUN_SUFFIX:-}
  sets=(--set "run_dir=$run")
  for kv in ${SET:-}; do sets+=(--set "$kv"); done
  "$BIN" train -c "$cfg" "$([ -n "${RESUME:-}" ] && echo --resume || echo --overwrite)" "${sets[@]}"
  # Candidates: best.pt, the mean of best.pt and last.pt, and (when the config keeps them) the mean of the last 5
  # validation checkpoints; the one with the highest validation BLEU (beam 5) decodes the test set.
  "$BIN" average --run "$run" --checkpoints "$run/best.pt" "$run/last.pt" --out "$run/avg_best_last.pt"
  cands=(best "$run/avg_best_last.pt")
  if compgen -G "$run/ckpt-*.pt" > /dev/null; then
    "$BIN" average --run "$run" --last 5 --out "$run/avg_last5.pt"
    cands+=("$run/avg_last5.pt")
  fi
  ckpt="" top=""
  for c in "${cands[@]}"; do
    "$BIN" evaluate --run "$run" --split valid --beam 5 --checkpoint "$c"
    b=$(bleu_of "$run/eval/valid.json")
    echo "multi30k: $m: validation BLEU (beam 5) with $c: $b"
    if [ -z "$top" ] || awk -v a="$b" -v t="$top" 'BEGIN { exit !(a > t) }'; then ckpt=$c top=$b; fi
  done
  # The length penalty: alpha 1.0 (the configs' eval.length_penalty) unless 1.2 or 1.4 scores higher on validation.
  alpha=1.0
  for a in 1.2 1.4; do
    "$BIN" evaluate --run "$run" --split valid --beam 5 --checkpoint "$ckpt" --length-penalty "$a"
    b=$(bleu_of "$run/eval/valid.json")
    echo "multi30k: $m: validation BLEU (beam 5) with $ckpt, length penalty $a: $b"
    if awk -v a="$b" -v t="$top" 'BEGIN { exit !(a > t) }'; then alpha=$a top=$b; fi
  done
  echo "multi30k: $m: test with $ckpt, length penalty $alpha (validation BLEU $top)"
  "$BIN" evaluate --run "$run" --beam 5 --checkpoint "$ckpt" --length-penalty "$alpha"
  runs+=("$run")
done
"$BIN" compare "${runs[@]}" -o "runs/multi30k_report${RUN_SUFFIX:-}"
echo "multi30k: report in runs/multi30k_report${RUN_SUFFIX:-}/report.md"
