#!/usr/bin/env bash
# Data-parallel training on this machine: the benchmark model (attnmt bench's default: biGRU 512,
# embeddings 256, batch 64, vocabularies of 8,000) trained by 1 process with all cores vs N processes
# with cores/N threads each, plus the time of one gradient all-reduce. Writes bench_dist.json (or $1).
# Usage: scripts/bench_dist.sh [OUT] (env: NPROC=2, STEPS=20, ATTENTION=bahdanau). Run it on a quiet machine.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench_dist.json}
NPROC=${NPROC:-2}
STEPS=${STEPS:-20}
ATTENTION=${ATTENTION:-bahdanau}
[ -x build/attnmt ] || bash scripts/build.sh
build/attnmt --log-level warn bench --attention "$ATTENTION" --steps "$STEPS" --json > "$OUT.one"
build/attnmt --log-level warn bench --attention "$ATTENTION" --steps "$STEPS" --json --nproc "$NPROC" > "$OUT.many"
python3 - "$OUT.one" "$OUT.many" "$OUT" <<'PY'
import json, os, sys
one, many = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
r1, rn = one["rows"][0], many["rows"][0]
out = {"attention": r1["attention"], "single_process": {"train_tokens_per_s": r1["train_tokens_per_s"],
       "train_mfu": r1["train_mfu"], "matmul_gflops": one["matmul_gflops"]},
       "data_parallel": {"ranks": many["world_size"], "backend": many["backend"],
       "train_tokens_per_s": rn["train_tokens_per_s"], "train_mfu": rn["train_mfu"],
       "matmul_gflops_summed": many["matmul_gflops"], "allreduce_ms_in_step": rn["allreduce_ms_in_step"],
       "allreduce_ms_alone": rn["allreduce_ms_alone"], "gradient_mb": rn["gradient_mb"]},
       "speedup": rn["train_tokens_per_s"] / r1["train_tokens_per_s"]}
json.dump(out, open(sys.argv[3] + ".tmp", "w"), indent=2)
os.replace(sys.argv[3] + ".tmp", sys.argv[3])
d = out["data_parallel"]
print(f"1 process:  {r1['train_tokens_per_s']:8.0f} target tok/s (MFU {100*r1['train_mfu']:.0f}%)")
print(f"{d['ranks']} processes: {d['train_tokens_per_s']:8.0f} target tok/s (MFU {100*d['train_mfu']:.0f}%), "
      f"speed-up {out['speedup']:.2f}x")
print(f"gradient all-reduce ({d['gradient_mb']:.1f} MB, {d['backend']}): {d['allreduce_ms_in_step']:.1f} ms per step "
      f"(incl. waiting for the slower rank), {d['allreduce_ms_alone']:.1f} ms alone")
PY
rm -f "$OUT.one" "$OUT.many"
echo "wrote $OUT"
