#!/usr/bin/env bash
# attnmt against the PyTorch-Python peer (../shared/peer/pyref_bench.py, the same model written as
# JoeyNMT's RNN path), alternating runs in the same environment (same BLAS kernel), ROUNDS rounds each
# for Bahdanau and Luong general: training target tokens/s and batched greedy sentences/s, and the ratios.
# Usage: scripts/peer_ratio.sh [ROUNDS] [STEPS]   (defaults 2 and 6; needs python3-torch, installed here)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2}
STEPS=${2:-6}
PEER=${PEER:-../shared/peer/pyref_bench.py}
[ -f "$PEER" ] || { echo "peer_ratio: $PEER not found (it lives in ../shared)" >&2; exit 2; }
# Debian's python3-torch lives in the system Python; a python3 earlier on PATH (pyenv, a venv) may lack it.
PY=${PYTHON:-/usr/bin/python3}
"$PY" -c 'import torch' 2>/dev/null || { SUDO=; [ "$(id -u)" = 0 ] || SUDO=sudo; $SUDO apt-get install -y -q python3-torch >/dev/null; }
[ -x build/attnmt ] || bash scripts/build.sh
OUT=$(mktemp -d)
for r in $(seq "$ROUNDS"); do
  for att in bahdanau luong; do
    ours=$att; [ "$att" = luong ] && ours=luong_general
    build/attnmt --log-level warn bench --attention "$ours" --steps "$STEPS" --json > "$OUT/attnmt_${att}_$r.json"
    "$PY" "$PEER" --attention "$att" --steps "$STEPS" --json > "$OUT/peer_${att}_$r.json"
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print(f"{'attention':10} {'round':>5} {'attnmt tok/s':>13} {'peer tok/s':>11} {'ratio':>6} {'attnmt greedy/s':>16} {'peer greedy/s':>14} {'ratio':>6}")
for att in ("bahdanau", "luong"):
    for r in range(1, rounds + 1):
        ours = json.load(open(f"{out}/attnmt_{att}_{r}.json"))["rows"][0]
        peer = json.loads(open(f"{out}/peer_{att}_{r}.json").read().strip().splitlines()[-1])
        t, pt = ours["train_tokens_per_s"], peer["train_tokens_per_s"]
        g, pg = ours["greedy_sentences_per_s"], peer["greedy_sentences_per_s"]
        print(f"{att:10} {r:>5} {t:>13.0f} {pt:>11.0f} {t/pt:>5.2f}x {g:>16.1f} {pg:>14.1f} {g/pg:>5.2f}x")
PY
rm -rf "$OUT"
