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
objs=()
for s in $SOURCES; do
  o="$OUT/$(echo "$s" | tr / _).o"
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ]; then
    clang++ $FLAGS -fsanitize=fuzzer-no-link -c "$s" -o "$o" $(pkg-config --cflags spdlog)
  fi
  objs+=("$o")
done
for t in "${TARGETS[@]}"; do
  clang++ $FLAGS "tests/fuzz/fuzz_$t.cpp" "${objs[@]}" -o "$OUT/fuzz_$t" $(pkg-config --cflags --libs spdlog)
done

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
for t in "${TARGETS[@]}"; do
  mkdir -p "$OUT/corpus/$t"
  log="$OUT/fuzz_$t.log"
  echo "fuzz: $t for ${SECONDS_PER_TARGET}s"
  if ! (cd "$OUT" && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ./"fuzz_$t" -max_total_time="$SECONDS_PER_TARGET" \
        -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "corpus/$t" "../tests/fuzz/seeds/$t") >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz: $t FAILED (log: $log; the input is in $OUT/crash-* or $OUT/timeout-*)"
    exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  corpus=$(ls "$OUT/corpus/$t" | wc -l)
  printf '%-10s %6ss %12s executions, no crash, corpus %s inputs\n' "$t" "$SECONDS_PER_TARGET" "$runs" "$corpus" | tee -a "$summary"
done
echo "fuzz: all targets clean (summary in $summary)"
