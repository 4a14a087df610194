#!/usr/bin/env bash
# attnmt's CPU kernels against their references, in one run: ROUNDS rounds of
# `attnmt bench --attention bahdanau|luong_general --steps STEPS --json`, each a `--kernels auto` run and a
# `--kernels reference` run (plain LibTorch operations, the path a CUDA device takes; the order alternating round by
# round, since the first run of a pair is often the slower on a shared machine), then one auto run per type with
# OpenBLAS's generic kernel set (OPENBLAS_CORETYPE=Prescott: what a CPU that OpenBLAS does not recognise gets).
# The environment's OPENBLAS_CORETYPE, if set, is kept for the other runs, as attnmt keeps it.
# Prints each run's training target tokens/s and MFU, greedy sentences/s and MFU, peak RSS and roofline, and per type
# the sums of the auto runs' training and greedy rates divided by the reference runs'.
# Usage: scripts/kernel_ratio.sh [ROUNDS] [STEPS]   (defaults 3 and 8)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
STEPS=${2:-8}
[[ $ROUNDS =~ ^[1-9][0-9]*$ && $STEPS =~ ^[1-9][0-9]*$ ]] || { echo "kernel_ratio: ROUNDS and STEPS must be positive integers, got '$ROUNDS' '$STEPS'" >&2; exit 2; }
[ -x build/attnmt ] || bash scripts/build.sh
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
run() {  # run TAG ATTENTION KERNELS [VAR=VALUE]
  local tag=$1 att=$2 kernels=$3
  shift 3
  env "$@" build/attnmt --log-level warn --kernels "$kernels" bench --attention "$att" --steps "$STEPS" --json > "$OUT/$tag.json"
}
for att in bahdanau luong_general; do
  for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then
      run "auto_${att}_$r" "$att" auto
      run "reference_${att}_$r" "$att" reference
    else
      run "reference_${att}_$r" "$att" reference
      run "auto_${att}_$r" "$att" auto
    fi
  done
  run "prescott_${att}_1" "$att" auto OPENBLAS_CORETYPE=Prescott
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print(f"{'attention':14} {'run':10} {'round':>5} {'BLAS':>9} {'roofline':>8} {'train tok/s (MFU)':>18} "
      f"{'greedy/s (MFU)':>15} {'peak RSS MB':>11}")
for att in ("bahdanau", "luong_general"):
    train, greedy = {}, {}
    for run, n in (("auto", rounds), ("reference", rounds), ("prescott", 1)):
        for r in range(1, n + 1):
            d = json.load(open(f"{out}/{run}_{att}_{r}.json"))
            x = d["rows"][0]
            train[run] = train.get(run, 0.0) + x["train_tokens_per_s"]
            greedy[run] = greedy.get(run, 0.0) + x["greedy_sentences_per_s"]
            print(f"{att:14} {run:10} {r:>5} {d['blas_kernel'] or '-':>9} {x['matmul_gflops']:>8.0f} "
                  f"{x['train_tokens_per_s']:>11.0f} ({100 * x['train_mfu']:>3.0f}%) "
                  f"{x['greedy_sentences_per_s']:>8.1f} ({100 * x['greedy_mfu']:>3.0f}%) {d['peak_rss_mb']:>11.0f}")
    print(f"{att:14} auto / reference (sums of {rounds} runs): training {train['auto'] / train['reference']:.2f}x, "
          f"greedy {greedy['auto'] / greedy['reference']:.2f}x")
PY
