#!/usr/bin/env bash
# Builds the libFuzzer targets under tests/fuzz/ with clang (address + undefined-behaviour sanitizers) and
# runs each for SECONDS (default 60), starting from the seed corpus in tests/fuzz/seeds/TARGET/.
# New inputs go to build-fuzz/corpus/TARGET; a crash leaves build-fuzz/crash-* and stops the script.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(config corpus tokenizer pharaoh vocab bleu request)

if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz: installing clang and its fuzzer runtime"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # A fresh machine may have no package lists yet: update once if the first try finds nothing.
  $SUDO apt-get install -y -q clang libclang-rt-14-dev >/dev/null 2>&1 ||
    { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q clang libclang-rt-14-dev >/dev/null; } ||
    $SUDO apt-get install -y -q clang libclang-common-14-dev >/dev/null
fi
bash scripts/setup.sh >/dev/null

OUT=build-fuzz
mkdir -p "$OUT"
SOURCES="src/common/config.cpp src/common/config_keys.cpp src/common/fs.cpp src/data/text.cpp src/data/corpus.cpp src/data/tokenizer.cpp src/data/vocab.cpp src/eval/bleu.cpp src/eval/chrf.cpp src/serve/request.cpp"
VERSION=$(sed -n "s/^project(attnmt VERSION \([0-9.]*\).*/\1/p" CMakeLists.txt)
FLAGS="-DATTNMT_VERSION=\"$VERSION\" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc -Itests/fuzz"
# The library objects once (without the fuzzer's main), then one binary per target.
# Compiles, links and fuzzing runs go JOBS at a time (default: the number of cores); each is one single-threaded
# process, and one after another they left a core idle (CI's fuzz part took 311 s on 2 cores).
JOBS=${JOBS:-$(nproc)}
throttle() {  # waits until fewer than JOBS background jobs run; a failed one fails the script
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || stop; done
}
drain() {  # waits for every background job; fails if any failed
  local rc=0
  for p in $(jobs -p); do wait "$p" || rc=1; done
  [ "$rc" = 0 ] || stop
}
stop() {  # a job failed: the others are ended, not left running
  kill $(jobs -rp) 2>/dev/null || true
  exit 1
}
SPDLOG_CFLAGS=$(pkg-config --cflags spdlog)
SPDLOG_LIBS=$(pkg-config --cflags --libs spdlog)
objs=()
for s in $SOURCES; do
  o="$OUT/$(echo "$s" | tr / _).o"
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ]; then
    throttle
    clang++ $FLAGS -fsanitize=fuzzer-no-link -c "$s" -o "$o" $SPDLOG_CFLAGS &
  fi
  objs+=("$o")
done
drain
for t in "${TARGETS[@]}"; do
  throttle
  clang++ $FLAGS "tests/fuzz/fuzz_$t.cpp" "${objs[@]}" -o "$OUT/fuzz_$t" $SPDLOG_LIBS &
done
drain

# Inputs that once failed (tests/fuzz/regressions/TARGET/) are replayed first.
for t in "${TARGETS[@]}"; do
  if [ -d "tests/fuzz/regressions/$t" ] && [ -n "$(ls "tests/fuzz/regressions/$t")" ]; then
    "$OUT/fuzz_$t" "tests/fuzz/regressions/$t"/* >"$OUT/regressions_$t.log" 2>&1 ||
      { tail -30 "$OUT/regressions_$t.log"; echo "fuzz: $t regression input fails again"; exit 1; }
    echo "fuzz: $t regressions pass ($(ls "tests/fuzz/regressions/$t" | wc -l) inputs)"
  fi
done

summary="$OUT/summary.txt"
: >"$summary"
fuzz_one() {  # fuzz_one TARGET: runs it, then prints its summary line (or its log's tail and FAILED)
  local t=$1 log="$OUT/fuzz_$1.log"
  mkdir -p "$OUT/corpus/$t"
  if ! (cd "$OUT" && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ./"fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" \
        -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "corpus/$t" "../tests/fuzz/seeds/$t") >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz: $t FAILED (log: $log; the input is in $OUT/crash-* or $OUT/timeout-*)"
    return 1
  fi
  local runs corpus
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  corpus=$(ls "$OUT/corpus/$t" | wc -l)
  printf '%-10s %6ss %12s executions, no crash, corpus %s inputs\n' "$t" "$SECONDS_PER_TARGET" "$runs" "$corpus" >"$OUT/summary_$t.txt"
}
echo "fuzz: ${#TARGETS[@]} targets, ${SECONDS_PER_TARGET}s each, $JOBS at a time: ${TARGETS[*]}"
for t in "${TARGETS[@]}"; do
  throttle
  fuzz_one "$t" &
done
drain
for t in "${TARGETS[@]}"; do cat "$OUT/summary_$t.txt"; done | tee "$summary"
echo "fuzz: all targets clean (summary in $summary)"
