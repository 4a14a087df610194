#!/usr/bin/env bash
# Runs attnmt bench on the standard benchmark model (bidirectional GRU, embeddings 256, hidden 512,
# batch 64, vocabularies of 8,000, sentences of 20-30 tokens) for every attention type and writes
# bench.json (or $1). Run it on a quiet machine: every figure is measured in this one process.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench.json}
[ -x build/attnmt ] || bash scripts/build.sh
build/attnmt bench --attention all --steps "${STEPS:-20}" --json > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
python3 - "$OUT" <<'PY' 2>/dev/null || cat "$OUT"
import json, sys
j = json.load(open(sys.argv[1]))
print(f"matmul {j['matmul_gflops']:.1f} GFLOP/s, peak RSS {j['peak_rss_mb']:.0f} MB")
for r in j["rows"]:
    print(f"{r['attention']:<16} train {r['train_tokens_per_s']:8.0f} tok/s  MFU {100*r['train_mfu']:5.1f}%  "
          f"greedy {r['greedy_sentences_per_s']:7.1f} sent/s MFU {100*r['greedy_mfu']:5.1f}%  "
          f"beam5 batched/single {r['beam5_batched_speedup']:.1f}x (MFU {100*r['beam5_batched_mfu']:.1f}% / {100*r['beam5_single_mfu']:.1f}%)  "
          f"roof {r['matmul_gflops']:.1f} (mean {r.get('matmul_gflops_mean', 0):.1f})")
PY
echo "wrote $OUT"
