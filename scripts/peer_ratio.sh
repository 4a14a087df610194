#!/usr/bin/env bash
# attnmt against the PyTorch-Python peer (../shared/peer/pyref_bench.py, the same model written as
# JoeyNMT's RNN path), alternating runs in the same environment (same BLAS kernel), ROUNDS rounds each
# for Bahdanau and Luong general: training target tokens/s and batched greedy sentences/s (30 decoder steps
# each), with MFU against attnmt's matmul rate of the same minute, and the ratios.
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
# The peer's FLOPs, counted analytically like src/model/flops.cpp (matrix products only, 2 FLOP per
# multiply-add, a training step = 3x its forward) for its defaults: E 256, H 512 per encoder direction,
# V 8000, source and target lengths uniform in 20..30 (mean 25 each), greedy 30 steps. Its model is
# larger than attnmt's benchmark model (encoder states 2H wide, not H), so tokens/s ratios and MFU differ.
E, H, V, S, T = 256, 512, 8000, 25.0, 25.0
enc = 2 * (E * 3 * H + H * 3 * H) + 2 * H * H            # per source token: both GRU directions + keys/gen
def dec(att):                                               # per target step
    core = (E + 2 * H) * 3 * H + H * 3 * H + 3 * H * H + H * V   # GRUCell, att_vec, output layer
    return core + (H * H + S * H + S * 2 * H if att == "bahdanau" else 2 * S * 2 * H)
def peer_train_flop_per_token(att): return 3 * 2 * (enc * S / T + dec(att))
def peer_greedy_flop_per_sentence(att): return 2 * (enc * S + 30 * dec(att))
print(f"{'attention':10} {'round':>5} {'roofline':>8} {'attnmt tok/s (MFU)':>19} {'peer tok/s (MFU)':>17} {'ratio':>6} "
      f"{'attnmt greedy/s (MFU)':>22} {'peer greedy/s (MFU)':>20} {'ratio':>6}")
for att in ("bahdanau", "luong"):
    for r in range(1, rounds + 1):
        ours = json.load(open(f"{out}/attnmt_{att}_{r}.json"))["rows"][0]
        peer = json.loads(open(f"{out}/peer_{att}_{r}.json").read().strip().splitlines()[-1])
        roof = ours["matmul_gflops"]  # attnmt's 1024^3 rate in the same minute
        t, pt = ours["train_tokens_per_s"], peer["train_tokens_per_s"]
        # greedy: sentences/s times decoder steps per sentence (attnmt's bench and the peer both run 30)
        g, pg = ours["greedy_sentences_per_s"], peer["greedy_sentences_per_s"]
        gr = g * ours["greedy_steps"] / (pg * 30)
        pm = pt * peer_train_flop_per_token(att) / 1e9 / roof
        pgm = pg * peer_greedy_flop_per_sentence(att) / 1e9 / roof
        print(f"{att:10} {r:>5} {roof:>8.0f} {t:>12.0f} ({100 * ours['train_mfu']:>3.0f}%) {pt:>10.0f} ({100 * pm:>3.0f}%) {t/pt:>5.2f}x "
              f"{g:>15.1f} ({100 * ours['greedy_mfu']:>3.0f}%) {pg:>13.1f} ({100 * pgm:>3.0f}%) {gr:>5.2f}x")
PY
rm -rf "$OUT"
