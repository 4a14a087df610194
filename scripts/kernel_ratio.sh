#!/usr/bin/env bash
# The default environment against OPENBLAS_CORETYPE=SkylakeX set explicitly: ROUNDS rounds of
# `attnmt bench --attention bahdanau|luong_general --steps STEPS --json`, each a default run and a SkylakeX run
# (the order alternating round by round, since the first run of a pair is often the slower on a shared machine),
# then one run per type with OpenBLAS's generic kernel set (OPENBLAS_CORETYPE=Prescott). "Default" is whatever
# this shell's environment holds: a value set for OPENBLAS_CORETYPE is kept, as attnmt keeps it.
# Prints each run's training target tokens/s and MFU, greedy sentences/s and MFU, peak RSS and roofline, and
# per type the sum of the default runs' training rates divided by the sum of the SkylakeX runs'.
# Usage: scripts/kernel_ratio.sh [ROUNDS] [STEPS]   (defaults 4 and 8)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-4}
STEPS=${2:-8}
[[ $ROUNDS =~ ^[1-9][0-9]*$ && $STEPS =~ ^[1-9][0-9]*$ ]] || { echo "kernel_ratio: ROUNDS and STEPS must be positive integers, got '$ROUNDS' '$STEPS'" >&2; exit 2; }
[ -x build/attnmt ] || bash scripts/build.sh
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
run() {  # run TAG ATTENTION [VAR=VALUE]
  local tag=$1 att=$2
  shift 2
  env "$@" build/attnmt --log-level warn bench --attention "$att" --steps "$STEPS" --json > "$OUT/$tag.json"
}
for att in bahdanau luong_general; do
  for r in $(seq "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then
      run "default_${att}_$r" "$att"
      run "skylakex_${att}_$r" "$att" OPENBLAS_CORETYPE=SkylakeX
    else
      run "skylakex_${att}_$r" "$att" OPENBLAS_CORETYPE=SkylakeX
      run "default_${att}_$r" "$att"
    fi
  done
  run "prescott_${att}_1" "$att" OPENBLAS_CORETYPE=Prescott
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print(f"{'attention':14} {'environment':10} {'round':>5} {'kernel':>9} {'roofline':>8} {'train tok/s (MFU)':>18} "
      f"{'greedy/s (MFU)':>15} {'peak RSS MB':>11}")
for att in ("bahdanau", "luong_general"):
    sums = {}
    for env, n in (("default", rounds), ("skylakex", rounds), ("prescott", 1)):
        for r in range(1, n + 1):
            d = json.load(open(f"{out}/{env}_{att}_{r}.json"))
            x = d["rows"][0]
            sums[env] = sums.get(env, 0.0) + x["train_tokens_per_s"]
            print(f"{att:14} {env:10} {r:>5} {d['blas_kernel'] or '-':>9} {x['matmul_gflops']:>8.0f} "
                  f"{x['train_tokens_per_s']:>11.0f} ({100 * x['train_mfu']:>3.0f}%) "
                  f"{x['greedy_sentences_per_s']:>8.1f} ({100 * x['greedy_mfu']:>3.0f}%) {d['peak_rss_mb']:>11.0f}")
    print(f"{att:14} training, default / SkylakeX (sums of {rounds} runs): {sums['default'] / sums['skylakex']:.3f}x")
PY
