#!/usr/bin/env bash
# What a GPU would be asked to do, counted on this machine: the operations one training step (per target position),
# one greedy and one beam decoder step dispatch, and the host reads of each, for attnmt's device path
# (--kernels reference) and its default path, beside the PyTorch-Python peer counted the same way
# (../shared/peer/pyref_bench.py --count-ops). Prints a Markdown table; the JSON goes to $OUT (default out/dispatch).
#   scripts/dispatch_counts.sh [ATTNMT]        (default build/attnmt; the peer runs under PYTHON, default /usr/bin/python3)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/attnmt}
[ -x "$BIN" ] || { echo "dispatch_counts: no attnmt at $BIN (scripts/build.sh builds it)" >&2; exit 2; }
PEER=${PEER:-../shared/peer/pyref_bench.py}
PYTHON=${PYTHON:-/usr/bin/python3}
OUT=${OUT:-out/dispatch}
mkdir -p "$OUT"
for k in reference auto; do
  "$BIN" --kernels "$k" bench --attention all --steps 1 --json 2>/dev/null >"$OUT/attnmt_$k.json"
done
have_peer=0
if [ -f "$PEER" ] && "$PYTHON" -c "import torch" 2>/dev/null; then
  have_peer=1
  for a in bahdanau luong none; do
    "$PYTHON" "$PEER" --attention "$a" --steps 2 --count-ops --json 2>/dev/null | tail -n 1 >"$OUT/peer_$a.json"
  done
else
  echo "dispatch_counts: no peer ($PEER under $PYTHON with torch): its column stays empty" >&2
fi
python3 - "$OUT" "$have_peer" <<'EOF'
import json, sys
out, have_peer = sys.argv[1], sys.argv[2] == "1"
ref = {r["attention"]: r for r in json.load(open(f"{out}/attnmt_reference.json"))["rows"]}
auto = {r["attention"]: r for r in json.load(open(f"{out}/attnmt_auto.json"))["rows"]}
peer = {}
if have_peer:
    for a in ("bahdanau", "luong", "none"):
        p = json.load(open(f"{out}/peer_{a}.json"))
        peer[a] = p
peer_of = {"bahdanau": "bahdanau", "none": "none", "luong_general": "luong"}
print("| attention | training ops / target position: reference (auto) | peer | greedy ops / step: reference (auto) | peer | beam-5 ops / step | host reads: training step, greedy step, beam step |")
print("|---|---|---|---|---|---|---|")
for name, r in ref.items():
    d, h, a = r["dispatched_ops"], r["host_reads"], auto[name]["dispatched_ops"]
    p = peer.get(peer_of.get(name, ""))
    pt = f"{p['ops_per_training_step']['dispatched_ops_per_target_position']:.1f}" if p else ""
    pg = f"{p['ops_per_greedy_decoder_step']['dispatched_ops']:.1f}" if p else ""
    print(f"| {name} | {d['per_target_position']:.1f} ({a['per_target_position']:.1f}) | {pt} | "
          f"{d['per_greedy_step']:.1f} ({a['per_greedy_step']:.1f}) | {pg} | {d['per_beam_step']:.1f} | "
          f"{h['per_training_step']}, {h['per_greedy_step']:.0f}, {h['per_beam_step']:.0f} |")
EOF
