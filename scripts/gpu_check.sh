#!/usr/bin/env bash
# What only a machine with a GPU can check, in two phases, each one device command of a few minutes that writes one
# JSON (and at most two logs) into $OUT; everything else goes to $WORK. docs/gpu.md says which commands to send.
#   scripts/gpu_check.sh build [--device cuda|cpu] [--bin ATTNMT]
#       the build against the machine's PyTorch (when --bin is missing), the Cuda.* tests and the dispatch-count tests
#       of that build (a failing test fails the phase), the first training step's loss on the device against the CPU's
#       -> $OUT/gpu_check_build.json, $OUT/build.log (on a failed build), $OUT/tests.log
#   scripts/gpu_check.sh run [--device cuda|cpu] [--bin ATTNMT]
#       the benchmark model (bench --json: training, greedy and beam, dispatched operations) and the PyTorch-Python
#       peer on the same device in the same command, alternating; the toy Bahdanau model trained TRAIN_SECONDS and
#       evaluated with beam 5; a run stopped and resumed against the same run uninterrupted; on CUDA a GPU checkpoint
#       translating on the CPU -> $OUT/gpu_check_run.json, $OUT/bench.json, $OUT/peer.json
# --bin      a build of attnmt (default build-pytorch/attnmt; built with scripts/build.sh --pytorch when missing,
#            against .venv-pytorch's torch or else python3's, with deps/ from scripts/vendor_deps.sh when present)
# OUT=DIR    the phase's results (default out/gpu_check); WORK=DIR its run directories and logs (default
#            ${TMPDIR:-/tmp}/attnmt_gpu_check)
# TRAIN_SECONDS (60), BENCH_STEPS (10), ROUNDS (2: bench and peer alternating), RESUME_STEPS (120: the resumed run's
# length, stopped at half; an even number), BENCH_SIZE (BATCH,VOCAB: a smaller benchmark model for attnmt and the peer
# alike, as CI's rehearsal on a CPU uses; default the benchmark model's), PEER (the peer script: default
# ../shared/peer/pyref_bench.py, else .gpu/peer/pyref_bench.py), PYTHON (a python with torch for the peer: default
# .venv-pytorch/bin/python, or $ATTNMT_PYTORCH_VENV's, where it exists, else python3)
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: scripts/gpu_check.sh build|run [--device cuda|cuda:N|cpu] [--bin ATTNMT]" >&2; exit 2; }
[ $# -ge 1 ] || usage
PHASE=$1
shift
case "$PHASE" in build | run) ;; *) usage ;; esac
DEVICE=cuda
BIN=build-pytorch/attnmt
while [ $# -gt 0 ]; do
  case "$1" in
    --device) [ $# -ge 2 ] || usage; DEVICE=$2; shift 2 ;;
    --bin) [ $# -ge 2 ] || usage; BIN=$2; shift 2 ;;
    *) usage ;;
  esac
done
case "$DEVICE" in cpu | cuda | cuda:*) ;; *) echo "gpu_check: --device must be cuda, cuda:N or cpu" >&2; exit 2 ;; esac
for v in TRAIN_SECONDS BENCH_STEPS ROUNDS RESUME_STEPS; do
  val=${!v:-1}
  [[ "$val" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check: $v must be a positive whole number, got '$val'" >&2; exit 2; }
done
RESUME_STEPS=${RESUME_STEPS:-120}
[ $((RESUME_STEPS % 2)) = 0 ] || { echo "gpu_check: RESUME_STEPS must be even, got $RESUME_STEPS" >&2; exit 2; }
size_args=()
if [ -n "${BENCH_SIZE:-}" ]; then
  [[ "$BENCH_SIZE" =~ ^([1-9][0-9]*),([1-9][0-9]*)$ ]] ||
    { echo "gpu_check: BENCH_SIZE must be BATCH,VOCAB, got '$BENCH_SIZE'" >&2; exit 2; }
  size_args=(--batch "${BASH_REMATCH[1]}" --vocab "${BASH_REMATCH[2]}")
fi
OUT=${OUT:-out/gpu_check}
WORK=${WORK:-${TMPDIR:-/tmp}/attnmt_gpu_check}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
rm -rf "$WORK/$PHASE"
mkdir -p "$WORK/$PHASE"
W=$(cd "$WORK/$PHASE" && pwd)
JSON="$OUT/gpu_check_$PHASE.json"
rm -f "$JSON"
FIG="$W/figures.txt"  # KEY<TAB>VALUE lines, turned into the phase's JSON at the end
: >"$FIG"
fig() { printf '%s\t%s\n' "$1" "$2" >>"$FIG"; }
ok() { echo "gpu_check: ok   $*"; }
finish() {
  python3 - "$FIG" "$JSON" <<'EOF'
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
fail() { echo "gpu_check: FAIL $*" >&2; fig failed "\"$(echo "$*" | sed 's/"/'\''/g')\""; finish; exit 1; }
start_all=$(date +%s)
# Stopped from outside (a timeout): the figures so far still make the phase's JSON.
trap 'fail "stopped by a signal"' TERM INT
fig phase "\"$PHASE\""
fig device "\"$DEVICE\""
BUILD_DIR=$(dirname "$BIN")
C=data/toy

# A small Bahdanau run (dropout on): resume and the first step.
cat >"$W/cfg.json" <<EOF
{"run_dir": "$W/runs/whole",
 "data": {"train": {"src": "$C/train.en", "tgt": "$C/train.fr"}, "valid": {"src": "$C/valid.en", "tgt": "$C/valid.fr"},
          "tokenizer": "space"},
 "model": {"embed_dim": 64, "hidden_dim": 128, "dropout": 0.2, "attention": {"type": "bahdanau"}},
 "train": {"epochs": 100, "max_steps": $RESUME_STEPS, "valid_every": $((RESUME_STEPS / 2)), "batch_size": 32, "seed": 3}}
EOF
last_loss() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['valid_loss'])" "$1/metrics.jsonl"; }

if [ "$PHASE" = build ]; then
  if [ ! -x "$BIN" ]; then
    # A machine without Debian's development packages builds with the ones scripts/vendor_deps.sh put in deps/.
    if [ -d deps/usr ] && [ -z "${ATTNMT_DEPS:-}" ]; then export ATTNMT_DEPS=$PWD/deps; fi
    start=$(date +%s)
    # Many cores (the lent machine has 16): batches of 2, so that more of them compile side by side; on fewer,
    # CMakeLists.txt cuts the batches to the cores.
    batch=()
    [ "$(nproc)" -ge 8 ] && batch=(-DCMAKE_UNITY_BUILD_BATCH_SIZE=2)
    if ! BUILD_DIR="$BUILD_DIR" bash scripts/build.sh --pytorch "${batch[@]}" >"$W/build.log" 2>&1; then
      tail -n 60 "$W/build.log" >"$OUT/build.log"
      fail "build: $(tail -n 1 "$W/build.log")"
    fi
    fig build_seconds $(( $(date +%s) - start ))
  fi
  fig version "\"$("$BIN" --version)\""
  if [ "$DEVICE" != cpu ]; then "$BIN" --version | grep -q "with CUDA" || fail "$BIN has no CUDA"; fi
  ok "$("$BIN" --version)"

  # The tests that need a device (they skip, saying why, where none is visible) and the counting tests.
  tests=$BUILD_DIR/attnmt_tests
  [ -x "$tests" ] || fail "no test binary at $tests"
  start=$(date +%s)
  set +e
  "$tests" --gtest_filter='Cuda.*:DispatchCount.*:HostReads.*' >"$OUT/tests.log" 2>&1
  rc=$?
  set -e
  fig tests.seconds $(( $(date +%s) - start ))
  fig tests.passed "$(grep -c '^\[       OK \]' "$OUT/tests.log" || true)"
  fig tests.skipped "$(grep -c '^\[  SKIPPED \]' "$OUT/tests.log" || true)"
  fig tests.failed "$(grep -c '^\[  FAILED  \].*ms)' "$OUT/tests.log" || true)"
  exit_crash=""
  if [ "$rc" -ge 128 ] && grep -q '^\[  PASSED  \]' "$OUT/tests.log" && ! grep -q '^\[  FAILED  \]' "$OUT/tests.log"; then
    # Every test passed and the process died on its way out: say so (the phase fails at its end), take a backtrace
    # where a debugger is at hand, and go on to the first step's loss.
    exit_crash="the test binary died with signal $((rc - 128)) after every test passed"
    fig tests.exit_crash "\"$exit_crash\""
    dbg=$(command -v gdb || command -v cuda-gdb || true)
    if [ -n "$dbg" ]; then
      timeout "${GDB_SECONDS:-90}" "$dbg" -q -batch -ex run -ex bt -ex 'info threads' -ex 'thread apply all bt 8' \
        --args "$tests" --gtest_filter='Cuda.*:DispatchCount.*:HostReads.*' >"$W/crash_gdb.log" 2>&1 || true
      grep -v '^\[' "$W/crash_gdb.log" | tail -n 150 >"$OUT/crash_backtrace.txt"
    fi
    echo "gpu_check: FAIL $exit_crash" >&2
  else
    [ "$rc" = 0 ] || fail "tests: $(grep -m 3 '^\[  FAILED  \]' "$OUT/tests.log" | tr '\n' ' ')"
  fi
  ok "tests: $(grep -E '^\[  PASSED  \]' "$OUT/tests.log")"

  # The first step's training loss, device against CPU (dropout off: the two draw different masks).
  for side in device cpu; do
    d=$DEVICE
    [ "$side" = cpu ] && d=cpu
    "$BIN" --device "$d" train -c "$W/cfg.json" --set run_dir="$W/runs/first_$side" --set train.max_steps=1 \
      --set model.dropout=0 >"$W/first_$side.log" 2>&1 || fail "first step on $d: $(tail -n 1 "$W/first_$side.log")"
  done
  first() { python3 -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['train_loss'])" "$1/metrics.jsonl"; }
  x=$(first "$W/runs/first_device")
  y=$(first "$W/runs/first_cpu")
  fig first_step.device_loss "$x"
  fig first_step.cpu_loss "$y"
  python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b) <= 1e-4*abs(b) else 1)" "$x" "$y" ||
    fail "first step's loss $x on $DEVICE, $y on the CPU"
  ok "first step's loss $x on $DEVICE, $y on the CPU"
  fig seconds $(( $(date +%s) - start_all ))
  [ -z "$exit_crash" ] || fail "$exit_crash"
  finish
  echo "gpu_check: build phase passed"
  exit 0
fi

# The run phase.
[ -x "$BIN" ] || fail "no attnmt at $BIN: send the build phase first (docs/gpu.md)"
fig version "\"$("$BIN" --version)\""
PEER=${PEER:-}
if [ -z "$PEER" ]; then
  for p in ../shared/peer/pyref_bench.py .gpu/peer/pyref_bench.py; do [ -f "$p" ] && PEER=$p && break; done
fi
PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
  PYTHON=python3
  venv=${ATTNMT_PYTORCH_VENV:-.venv-pytorch}
  [ -x "$venv/bin/python" ] && PYTHON=$venv/bin/python
fi
[ -n "$PEER" ] && [ -f "$PEER" ] || fail "no peer script (PEER, ../shared/peer/pyref_bench.py or .gpu/peer/pyref_bench.py)"
"$PYTHON" -c "import torch" 2>/dev/null || fail "$PYTHON has no torch for the peer"

# 1. The benchmark model, attnmt and the peer alternating on the same device.
STEPS=${BENCH_STEPS:-10}
for round in $(seq 1 "${ROUNDS:-2}"); do
  "$BIN" --device "$DEVICE" bench --attention bahdanau --json --steps "$STEPS" "${size_args[@]}" >"$W/bench_$round.json" 2>"$W/bench_$round.log" ||
    fail "bench: $(tail -n 1 "$W/bench_$round.log")"
  "$PYTHON" "$PEER" --attention bahdanau --device "${DEVICE%%:*}" --steps "$STEPS" "${size_args[@]}" --count-ops --json >"$W/peer_$round.json" 2>"$W/peer_$round.log" ||
    fail "peer: $(tail -n 1 "$W/peer_$round.log")"
done
python3 - "$W" "${ROUNDS:-2}" "$OUT" >>"$FIG" <<'EOF'
import json, statistics, sys
w, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ours = [json.load(open(f"{w}/bench_{r}.json")) for r in range(1, rounds + 1)]
peer = [json.loads(open(f"{w}/peer_{r}.json").read().strip().splitlines()[-1]) for r in range(1, rounds + 1)]
json.dump(ours[-1], open(f"{out}/bench.json", "w"), indent=2)
json.dump(peer, open(f"{out}/peer.json", "w"), indent=2)
row = lambda j: j["rows"][0]
med = lambda xs: statistics.median(xs)
train = med([row(j)["train_tokens_per_s"] for j in ours]); ptrain = med([p["train_tokens_per_s"] for p in peer])
greedy = med([row(j)["greedy_sentences_per_s"] for j in ours]); pgreedy = med([p["greedy_sentences_per_s"] for p in peer])
print(f"bench.train_tokens_per_s\t{train:.1f}")
print(f"bench.greedy_sentences_per_s\t{greedy:.2f}")
print(f"bench.beam5_batched_sentences_per_s\t{med([row(j)['beam5_batched_sentences_per_s'] for j in ours]):.2f}")
print(f"bench.dispatched_ops\t{json.dumps(row(ours[-1])['dispatched_ops'])}")
print(f"bench.host_reads\t{json.dumps(row(ours[-1])['host_reads'])}")
if row(ours[-1]).get("greedy_cuda_graph"):  # greedy's step as a CUDA graph, beside the same search without it
    eager = med([row(j)["greedy_eager_sentences_per_s"] for j in ours])
    print(f"bench.greedy_eager_sentences_per_s\t{eager:.2f}")
    print(f"ratio.greedy_graph_over_eager\t{greedy / eager:.3f}")
if "cuda_kernels" in row(ours[-1]):  # on CUDA: the kernels the device ran, beside the CPU-side count above
    print(f"bench.cuda_kernels\t{json.dumps(row(ours[-1])['cuda_kernels'])}")
for k in ("precision", "cuda_tf32", "cudnn_tf32", "matmul_gflops", "libtorch"):
    if k in ours[-1]:
        print(f"bench.{k}\t{json.dumps(ours[-1][k])}")
print(f"peer.train_tokens_per_s\t{ptrain:.1f}")
print(f"peer.greedy_sentences_per_s\t{pgreedy:.2f}")
print(f"peer.ops\t{json.dumps({k: peer[-1].get(k) for k in ('ops_per_training_step', 'ops_per_greedy_decoder_step', 'torch')})}")
print(f"ratio.train_attnmt_over_peer\t{train / ptrain:.3f}")
print(f"ratio.greedy_attnmt_over_peer\t{greedy / pgreedy:.3f}")
EOF
ok "bench and peer, $(grep -E '^ratio' "$FIG" | tr '\n' ' ')"
# The same benchmark in TF32 and in bf16 (autocast), one run each, against the fp32 rounds above.
for p in tf32 bf16; do
  "$BIN" --device "$DEVICE" --precision "$p" bench --attention bahdanau --json --steps "$STEPS" "${size_args[@]}" >"$W/bench_$p.json" 2>"$W/bench_$p.log" ||
    fail "bench --precision $p: $(tail -n 1 "$W/bench_$p.log")"
  python3 - "$W/bench_$p.json" "$p" >>"$FIG" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
r = j["rows"][0]
p = sys.argv[2]
assert j["precision"] == p, (j["precision"], p)
print(f"bench_{p}.train_tokens_per_s\t{r['train_tokens_per_s']:.1f}")
print(f"bench_{p}.greedy_sentences_per_s\t{r['greedy_sentences_per_s']:.2f}")
print(f"bench_{p}.tf32\t{json.dumps({'cuda': j['cuda_tf32'], 'cudnn': j['cudnn_tf32']})}")
EOF
done
ok "bench in tf32 and bf16: $(grep -E '^bench_(tf32|bf16).train' "$FIG" | tr '\n' ' ')"

# 2. The toy Bahdanau model, TRAIN_SECONDS, beam-5 BLEU.
minutes=$(python3 -c "print(${TRAIN_SECONDS:-60} / 60)")
run="$W/runs/bahdanau"
"$BIN" --device "$DEVICE" train -c configs/bahdanau.json --set run_dir="$run" --set train.epochs=1000 \
  --set train.max_minutes="$minutes" --set train.early_stopping.patience=0 >"$W/train.log" 2>&1 ||
  fail "training bahdanau: $(tail -n 1 "$W/train.log")"
"$BIN" --device "$DEVICE" evaluate --run "$run" --beam 5 >"$W/eval.txt" 2>"$W/eval.log" || fail "evaluating bahdanau: $(tail -n 1 "$W/eval.log")"
python3 - "$run" >>"$FIG" <<'EOF'
import glob, json, os, sys
run = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
ev = json.load(open(max(glob.glob(os.path.join(run, "eval", "*.json")), key=os.path.getmtime)))
print(f"toy_bahdanau.steps\t{rows[-1]['step']}")
print(f"toy_bahdanau.train_seconds\t{rows[-1]['elapsed_s']:.1f}")
print(f"toy_bahdanau.train_tokens_per_s\t{sum(r['tokens_per_s'] for r in rows) / len(rows):.0f}")
print(f"toy_bahdanau.best_valid_bleu\t{max(r['valid_bleu'] for r in rows):.2f}")
for k in ("bleu", "by_length", "sentences_per_s", "beam_size"):
    if k in ev:
        print(f"toy_bahdanau.test_{k}\t{json.dumps(ev[k])}")
EOF
ok "toy bahdanau: $(grep -m1 '^BLEU' "$W/eval.txt")"

# 3. Stopped and resumed against uninterrupted, dropout on, on the device.
"$BIN" --device "$DEVICE" train -c "$W/cfg.json" >"$W/whole.log" 2>&1 || fail "uninterrupted run: $(tail -n 1 "$W/whole.log")"
"$BIN" --device "$DEVICE" train -c "$W/cfg.json" --set run_dir="$W/runs/split" --set train.max_steps=$((RESUME_STEPS / 2)) >"$W/split1.log" 2>&1 ||
  fail "first half: $(tail -n 1 "$W/split1.log")"
"$BIN" --device "$DEVICE" train -c "$W/cfg.json" --set run_dir="$W/runs/split" --resume >"$W/split2.log" 2>&1 ||
  fail "resumed half: $(tail -n 1 "$W/split2.log")"
a=$(last_loss "$W/runs/whole")
b=$(last_loss "$W/runs/split")
fig resume.uninterrupted_valid_loss "$a"
fig resume.resumed_valid_loss "$b"
fig resume.exact "$([ "$a" = "$b" ] && echo true || echo false)"
python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(0 if abs(a-b) <= 1e-5*abs(a) else 1)" "$a" "$b" ||
  fail "resumed run's validation loss $b, uninterrupted $a"
ok "resume: $b resumed, $a uninterrupted"

# 4. Only on CUDA: a GPU checkpoint translating on the CPU.
if [ "$DEVICE" != cpu ]; then
  "$BIN" --device "$DEVICE" translate --run "$run" -i "$C/test.en" -o "$W/gpu.txt" 2>"$W/gpu_translate.log" || fail "translate on CUDA"
  "$BIN" --device cpu translate --run "$run" -i "$C/test.en" -o "$W/cpu.txt" 2>"$W/cpu_translate.log" ||
    fail "a GPU checkpoint on the CPU: $(tail -n 1 "$W/cpu_translate.log")"
  same=$(paste -d '\t' "$W/gpu.txt" "$W/cpu.txt" | awk -F '\t' '$1 == $2' | wc -l)
  fig gpu_checkpoint_on_cpu.identical_translations "$same"
  fig gpu_checkpoint_on_cpu.sentences "$(wc -l <"$C/test.en")"
  ok "GPU checkpoint on the CPU: $same identical translations"
fi
fig seconds $(( $(date +%s) - start_all ))
finish
echo "gpu_check: run phase passed"
