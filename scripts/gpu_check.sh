#!/usr/bin/env bash
# What only a machine with a GPU can check, in one short run (a few minutes): run it there and keep its output.
#   scripts/gpu_check.sh [ATTNMT]   ATTNMT: a CUDA build of attnmt (default build-pytorch/attnmt, built first with
#                                   scripts/build.sh --pytorch when missing and PyPI's torch is installed)
# Writes its figures and logs under ${OUT:-out/gpu_check}; exits non-zero at the first check that fails.
#  1. the binary has CUDA and sees the device; --device auto picks it and says why
#  2. training on CUDA (dropout on) stopped and resumed equals the same run uninterrupted, to float rounding
#  3. a checkpoint written on the GPU loads and translates on the CPU, and the same translations come out
#  4. a checkpoint written on the CPU resumes on the GPU
#  5. more ranks than GPUs is refused in one line; with 2+ GPUs, --nproc 2 trains over NCCL
#  6. bench on CUDA (synchronised steps; TF32 as LibTorch's default leaves it), as JSON
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build-pytorch/attnmt}
OUT=${OUT:-out/gpu_check}
mkdir -p "$OUT"
if [ ! -x "$BIN" ]; then bash scripts/build.sh --pytorch; fi
ok() { echo "gpu_check: ok   $*"; }
fail() { echo "gpu_check: FAIL $*" >&2; exit 1; }

"$BIN" --version | tee "$OUT/version.txt"
grep -q "with CUDA" "$OUT/version.txt" || fail "1: $BIN has no CUDA"
"$BIN" --device auto bench --steps 1 --attention none >"$OUT/auto.log" 2>&1 || fail "1: bench --device auto ($(tail -1 "$OUT/auto.log"))"
grep -q "device auto: cuda:0" "$OUT/auto.log" || fail "1: --device auto did not choose the GPU: $(grep 'device auto' "$OUT/auto.log")"
ok "1: CUDA build, $(grep -o 'device auto: .*' "$OUT/auto.log")"

C="$OUT/corpus"
"$BIN" corpus --out "$C" --train 2000 --valid 100 --test 100 >/dev/null 2>&1 || fail "corpus"
cat >"$OUT/cfg.json" <<EOF
{"run_dir": "$OUT/run", "device": "cuda",
 "data": {"train": {"src": "$C/train.en", "tgt": "$C/train.fr"}, "valid": {"src": "$C/valid.en", "tgt": "$C/valid.fr"},
          "test": {"src": "$C/test.en", "tgt": "$C/test.fr"}, "tokenizer": "space"},
 "model": {"embed_dim": 64, "hidden_dim": 128, "dropout": 0.2, "attention": {"type": "bahdanau"}},
 "train": {"epochs": 100, "max_steps": 200, "valid_every": 50, "batch_size": 32, "seed": 3}}
EOF
metric() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['valid_loss'])" "$1/metrics.jsonl"; }
"$BIN" train -c "$OUT/cfg.json" --set run_dir="$OUT/whole" >"$OUT/whole.log" 2>&1 || fail "2: training on CUDA: $(tail -1 "$OUT/whole.log")"
"$BIN" train -c "$OUT/cfg.json" --set run_dir="$OUT/split" --set train.max_steps=100 >"$OUT/split1.log" 2>&1 || fail "2: first half"
"$BIN" train -c "$OUT/cfg.json" --set run_dir="$OUT/split" --resume >"$OUT/split2.log" 2>&1 || fail "2: resume on CUDA: $(tail -1 "$OUT/split2.log")"
a=$(metric "$OUT/whole"); b=$(metric "$OUT/split")
python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b) <= 1e-4*abs(a) else 1)" "$a" "$b" ||
  fail "2: resumed run's validation loss $b, uninterrupted $a"
ok "2: resume on CUDA: validation loss $b resumed, $a uninterrupted"

"$BIN" --device cuda translate --run "$OUT/whole" <"$C/test.en" >"$OUT/gpu.txt" 2>"$OUT/gpu_translate.log" || fail "3: translate on CUDA"
"$BIN" --device cpu translate --run "$OUT/whole" <"$C/test.en" >"$OUT/cpu.txt" 2>"$OUT/cpu_translate.log" ||
  fail "3: a GPU checkpoint on the CPU: $(tail -1 "$OUT/cpu_translate.log")"
same=$(paste -d '\t' "$OUT/gpu.txt" "$OUT/cpu.txt" | awk -F '\t' '$1 == $2' | wc -l)
[ "$same" -ge 95 ] || fail "3: only $same of 100 translations agree between GPU and CPU"
ok "3: GPU checkpoint on the CPU: $same of 100 translations identical"

"$BIN" --device cpu train -c "$OUT/cfg.json" --set run_dir="$OUT/fromcpu" --set train.max_steps=50 >"$OUT/cpu1.log" 2>&1 || fail "4: CPU half"
"$BIN" --device cuda train -c "$OUT/cfg.json" --set run_dir="$OUT/fromcpu" --set train.max_steps=100 --resume >"$OUT/cpu2.log" 2>&1 ||
  fail "4: a CPU checkpoint resumed on CUDA: $(tail -1 "$OUT/cpu2.log")"
ok "4: CPU checkpoint resumed on CUDA (validation loss $(metric "$OUT/fromcpu"))"

gpus=$(nvidia-smi -L 2>/dev/null | wc -l || echo 1)
set +e
"$BIN" train -c "$OUT/cfg.json" --set run_dir="$OUT/too_many" --nproc $((gpus + 1)) >"$OUT/too_many.log" 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "CUDA device(s) visible" "$OUT/too_many.log" || fail "5: --nproc $((gpus + 1)) on $gpus GPU(s): exit $rc"
ok "5: --nproc $((gpus + 1)) refused: $(tail -1 "$OUT/too_many.log")"
if [ "$gpus" -ge 2 ]; then
  "$BIN" train -c "$OUT/cfg.json" --set run_dir="$OUT/nccl" --nproc 2 >"$OUT/nccl.log" 2>&1 || fail "5: --nproc 2 over NCCL: $(tail -1 "$OUT/nccl.log")"
  grep -q "(nccl)" "$OUT/nccl.log" || fail "5: --nproc 2 did not use NCCL"
  ok "5: --nproc 2 over NCCL"
fi

"$BIN" --device cuda bench --json --steps 10 >"$OUT/bench.json" 2>"$OUT/bench.log" || fail "6: bench on CUDA: $(tail -1 "$OUT/bench.log")"
ok "6: bench on CUDA ($OUT/bench.json)"
echo "gpu_check: all checks passed"
