#!/usr/bin/env bash
# What only a machine with a GPU can check, in one run of a few minutes, into one JSON. Run it there when one is lent;
# `--device cpu` rehearses the same steps here end to end.
#   scripts/gpu_check.sh [--device cuda|cpu] [--bin ATTNMT]
#     --bin     a CUDA build of attnmt (default build-pytorch/attnmt, built first with scripts/build.sh --pytorch when
#               missing, against .venv-pytorch's torch or else the machine's python3's, with deps/ from
#               scripts/vendor_deps.sh where the machine lacks Debian's packages)
#     OUT=DIR   where logs and gpu_check.json go (default out/gpu_check)
#     TRAIN_SECONDS=N  training time of each toy model (default 90)
# Steps: versions; the test suite of that build (ctest; SKIP_SUITE=1 leaves it out); the toy corpus's `none` and
# `bahdanau` trained for TRAIN_SECONDS each on the device and evaluated with beam 5 (BLEU, BLEU by length);
# `bench --json`; a run with dropout stopped and resumed against the same run uninterrupted; the first step's
# training loss on the device against the CPU's. On CUDA also: a GPU checkpoint translating on the CPU, a CPU
# checkpoint resumed on the GPU, and --nproc over the number of GPUs refused in one line.
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=cuda
BIN=build-pytorch/attnmt
while [ $# -gt 0 ]; do
  case "$1" in
    --device) DEVICE=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    *) echo "usage: scripts/gpu_check.sh [--device cuda|cpu] [--bin ATTNMT]" >&2; exit 2 ;;
  esac
done
case "$DEVICE" in cpu | cuda | cuda:*) ;; *) echo "gpu_check: --device must be cuda, cuda:N or cpu" >&2; exit 2 ;; esac
OUT=${OUT:-out/gpu_check}
SECONDS_EACH=${TRAIN_SECONDS:-90}
rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
FIG="$OUT/figures.txt"  # KEY<TAB>VALUE lines, turned into gpu_check.json at the end
: >"$FIG"
fig() { printf '%s\t%s\n' "$1" "$2" >>"$FIG"; }
ok() { echo "gpu_check: ok   $*"; }
fail() { echo "gpu_check: FAIL $*" >&2; fig failed "$*"; finish; exit 1; }
finish() {
  python3 - "$FIG" "$OUT/gpu_check.json" <<'EOF'
import json, sys
out = {}
for line in open(sys.argv[1], encoding="utf-8"):
    key, _, value = line.rstrip("\n").partition("\t")
    try:
        value = json.loads(value)
    except ValueError:
        pass
    node = out
    parts = key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value
json.dump(out, open(sys.argv[2], "w"), indent=2)
print("gpu_check: wrote " + sys.argv[2])
EOF
}
fig device "\"$DEVICE\""

# 0. The build.
if [ ! -x "$BIN" ]; then
  # A machine without Debian's development packages builds with the ones scripts/vendor_deps.sh put in deps/.
  if [ -d deps/usr ] && [ -z "${ATTNMT_DEPS:-}" ]; then export ATTNMT_DEPS=$PWD/deps; fi
  start=$(date +%s)
  bash scripts/build.sh --pytorch >"$OUT/build.log" 2>&1 || fail "build: $(tail -1 "$OUT/build.log")"
  fig build_seconds $(( $(date +%s) - start ))
fi
BUILD_DIR=$(dirname "$BIN")
fig version "\"$("$BIN" --version)\""
if [ "$DEVICE" != cpu ]; then "$BIN" --version | grep -q "with CUDA" || fail "1: $BIN has no CUDA"; fi
ok "1: $("$BIN" --version)"

# 1. The suite (its Cuda* tests run where a device is visible and skip with the reason elsewhere).
if [ "${SKIP_SUITE:-0}" != 1 ] && [ -f "$BUILD_DIR/CTestTestfile.cmake" ]; then
  start=$(date +%s)
  set +e
  (cd "$BUILD_DIR" && ctest -j "$(nproc)" --timeout 900 >"$OUT/ctest.log" 2>&1)
  set -e
  fig tests.seconds $(( $(date +%s) - start ))
  fig tests.total "$(grep -Eo 'tests failed out of [0-9]+' "$OUT/ctest.log" | grep -Eo '[0-9]+$' || echo 0)"
  fig tests.failed "$(grep -Eo '[0-9]+ tests failed' "$OUT/ctest.log" | grep -Eo '^[0-9]+' || echo 0)"
  fig tests.skipped "$(grep -c 'Skipped' "$OUT/ctest.log" || true)"
  ok "2: suite: $(grep -E 'tests passed' "$OUT/ctest.log" || echo 'no summary')"
fi

# 2. The toy models, TRAIN_SECONDS each, beam-5 BLEU.
minutes=$(python3 -c "print($SECONDS_EACH / 60)")
for m in none bahdanau; do
  run="$OUT/runs/$m"
  "$BIN" --device "$DEVICE" train -c "configs/$m.json" --set run_dir="$run" --set train.epochs=1000 \
    --set train.max_minutes="$minutes" --set train.early_stopping.patience=0 >"$OUT/train_$m.log" 2>&1 ||
    fail "3: training $m: $(tail -1 "$OUT/train_$m.log")"
  "$BIN" --device "$DEVICE" evaluate --run "$run" --beam 5 >"$OUT/eval_$m.txt" 2>"$OUT/eval_$m.log" ||
    fail "3: evaluating $m: $(tail -1 "$OUT/eval_$m.log")"
  python3 - "$run" "$m" >>"$FIG" <<'EOF'
import glob, json, os, sys
run, m = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
ev = json.load(open(max(glob.glob(os.path.join(run, "eval", "*.json")), key=os.path.getmtime)))
print(f"models.{m}.steps\t{rows[-1]['step']}")
print(f"models.{m}.train_seconds\t{rows[-1]['elapsed_s']:.1f}")
print(f"models.{m}.train_tokens_per_s\t{sum(r['tokens_per_s'] for r in rows) / len(rows):.0f}")
print(f"models.{m}.best_valid_bleu\t{max(r['valid_bleu'] for r in rows):.2f}")
for k in ("bleu", "by_length", "sentences_per_s", "beam_size"):
    if k in ev:
        print(f"models.{m}.test_{k}\t{json.dumps(ev[k])}")
EOF
  ok "3: $m: $(grep -m1 '^BLEU' "$OUT/eval_$m.txt")"
done

# 3. bench.
"$BIN" --device "$DEVICE" bench --json --steps 10 >"$OUT/bench.json" 2>"$OUT/bench.log" || fail "4: bench: $(tail -1 "$OUT/bench.log")"
fig bench "$(python3 -c "import json; j=json.load(open('$OUT/bench.json')); print(json.dumps({k: j.get(k) for k in ('device','matmul_gflops','cuda_tf32','libtorch','rows')}))")"
ok "4: bench ($OUT/bench.json)"

# 4. Stopped and resumed against uninterrupted, dropout on, on the device.
C=data/toy
cat >"$OUT/cfg.json" <<EOF
{"run_dir": "$OUT/runs/whole",
 "data": {"train": {"src": "$C/train.en", "tgt": "$C/train.fr"}, "valid": {"src": "$C/valid.en", "tgt": "$C/valid.fr"},
          "tokenizer": "space"},
 "model": {"embed_dim": 64, "hidden_dim": 128, "dropout": 0.2, "attention": {"type": "bahdanau"}},
 "train": {"epochs": 100, "max_steps": 120, "valid_every": 60, "batch_size": 32, "seed": 3}}
EOF
last_loss() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['valid_loss'])" "$1/metrics.jsonl"; }
"$BIN" --device "$DEVICE" train -c "$OUT/cfg.json" >"$OUT/whole.log" 2>&1 || fail "5: uninterrupted run: $(tail -1 "$OUT/whole.log")"
"$BIN" --device "$DEVICE" train -c "$OUT/cfg.json" --set run_dir="$OUT/runs/split" --set train.max_steps=60 >"$OUT/split1.log" 2>&1 ||
  fail "5: first half: $(tail -1 "$OUT/split1.log")"
"$BIN" --device "$DEVICE" train -c "$OUT/cfg.json" --set run_dir="$OUT/runs/split" --resume >"$OUT/split2.log" 2>&1 ||
  fail "5: resumed half: $(tail -1 "$OUT/split2.log")"
a=$(last_loss "$OUT/runs/whole")
b=$(last_loss "$OUT/runs/split")
fig resume.uninterrupted_valid_loss "$a"
fig resume.resumed_valid_loss "$b"
python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b) <= 1e-5*abs(a) else 1)" "$a" "$b" ||
  fail "5: resumed run's validation loss $b, uninterrupted $a"
fig resume.exact "$([ "$a" = "$b" ] && echo true || echo false)"
ok "5: resume: $b resumed, $a uninterrupted"

# 5. The first step's training loss, device against CPU (dropout off: the two draw different masks).
for side in device cpu; do
  d=$DEVICE
  [ "$side" = cpu ] && d=cpu
  "$BIN" --device "$d" train -c "$OUT/cfg.json" --set run_dir="$OUT/runs/first_$side" --set train.max_steps=1 \
    --set model.dropout=0 >"$OUT/first_$side.log" 2>&1 || fail "6: first step on $d: $(tail -1 "$OUT/first_$side.log")"
done
first() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['train_loss'])" "$1/metrics.jsonl"; }
x=$(first "$OUT/runs/first_device")
y=$(first "$OUT/runs/first_cpu")
fig first_step.device_loss "$x"
fig first_step.cpu_loss "$y"
python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b) <= 1e-4*abs(b) else 1)" "$x" "$y" ||
  fail "6: first step's loss $x on $DEVICE, $y on the CPU"
ok "6: first step's loss $x on $DEVICE, $y on the CPU"

# 6. Only on CUDA: checkpoints between GPU and CPU, and ranks against devices.
if [ "$DEVICE" != cpu ]; then
  run="$OUT/runs/bahdanau"
  "$BIN" --device "$DEVICE" translate --run "$run" -i "$C/test.en" -o "$OUT/gpu.txt" 2>"$OUT/gpu_translate.log" || fail "7: translate on CUDA"
  "$BIN" --device cpu translate --run "$run" -i "$C/test.en" -o "$OUT/cpu.txt" 2>"$OUT/cpu_translate.log" ||
    fail "7: a GPU checkpoint on the CPU: $(tail -1 "$OUT/cpu_translate.log")"
  same=$(paste -d '\t' "$OUT/gpu.txt" "$OUT/cpu.txt" | awk -F '\t' '$1 == $2' | wc -l)
  fig gpu_checkpoint_on_cpu.identical_translations "$same"
  fig gpu_checkpoint_on_cpu.sentences "$(wc -l <"$C/test.en")"
  ok "7: GPU checkpoint on the CPU: $same identical translations"
  "$BIN" --device cpu train -c "$OUT/cfg.json" --set run_dir="$OUT/runs/fromcpu" --set train.max_steps=60 >"$OUT/cpu1.log" 2>&1 || fail "8: CPU half"
  "$BIN" --device "$DEVICE" train -c "$OUT/cfg.json" --set run_dir="$OUT/runs/fromcpu" --resume >"$OUT/cpu2.log" 2>&1 ||
    fail "8: a CPU checkpoint resumed on CUDA: $(tail -1 "$OUT/cpu2.log")"
  fig cpu_checkpoint_on_gpu.valid_loss "$(last_loss "$OUT/runs/fromcpu")"
  ok "8: CPU checkpoint resumed on CUDA"
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
  gpus=${gpus:-1}
  set +e
  "$BIN" --device "$DEVICE" train -c "$OUT/cfg.json" --set run_dir="$OUT/runs/too_many" --nproc $((gpus + 1)) >"$OUT/too_many.log" 2>&1
  rc=$?
  set -e
  [ "$rc" = 2 ] && grep -q "CUDA device(s) visible" "$OUT/too_many.log" || fail "9: --nproc $((gpus + 1)) on $gpus GPU(s): exit $rc"
  fig too_many_ranks "\"$(tail -1 "$OUT/too_many.log" | sed 's/"/'\''/g')\""
  ok "9: --nproc $((gpus + 1)) refused"
fi
finish
echo "gpu_check: all checks passed"
