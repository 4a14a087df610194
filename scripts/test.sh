#!/usr/bin/env bash
# The README's test command: set up, build (Release), run every test with ctest.
#   scripts/test.sh             the normal build in build/
#   scripts/test.sh --sanitize  attnmt's own code built with -fsanitize=address,undefined in build-sanitize/
#                               (LibTorch is not instrumented; tests/sanitizer/lsan.supp lists what is
#                               suppressed, each entry with the evidence that it is LibTorch's own)
#   scripts/test.sh --pytorch   built against PyPI's LibTorch (2.x, CUDA compiled in) in build-pytorch/, every test on
#                               the CPU; with build/attnmt there (the Debian build), checkpoints are also resumed
#                               across the two (tests/test_versions.cpp)
set -euo pipefail
cd "$(dirname "$0")/.."
SANITIZE=0
PYTORCH=0
for a in "$@"; do
  case "$a" in
    --sanitize) SANITIZE=1 ;;
    --pytorch) PYTORCH=1 ;;
    *) echo "usage: scripts/test.sh [--sanitize | --pytorch]" >&2; exit 2 ;;
  esac
done
if [ "$PYTORCH" = 1 ]; then
  bash scripts/setup.sh --pytorch
  export BUILD_DIR=${BUILD_DIR:-build-pytorch}
  bash scripts/build.sh --pytorch
  if [ -z "${ATTNMT_OTHER_BUILD:-}" ] && [ -x build/attnmt ]; then export ATTNMT_OTHER_BUILD=$PWD/build/attnmt; fi
elif [ "$SANITIZE" = 1 ]; then
  bash scripts/setup.sh
  export BUILD_DIR=${BUILD_DIR:-build-sanitize}
  # -O1 -g1: line tables are all the sanitizers' reports need; full debug info at -O2 made the cold build
  # of the torch-heavy sources far slower on 2 cores.
  bash scripts/build.sh -DATTNMT_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:detect_odr_violation=0}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/sanitizer/lsan.supp:print_suppressions=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1:suppressions=$PWD/tests/sanitizer/ubsan.supp}
else
  bash scripts/setup.sh
  bash scripts/build.sh
fi
# The browser test of `attnmt serve`'s page (tests/test_serve.cpp) drives Debian's chromium through chromium-driver;
# without them it skips, saying so. ATTNMT_NO_BROWSER=1 leaves them out.
if [ -z "${ATTNMT_NO_BROWSER:-}" ] && command -v apt-get >/dev/null; then
  browser=()
  for p in chromium chromium-driver; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || browser+=("$p")
  done
  if [ ${#browser[@]} -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    echo "test: installing ${browser[*]} for the browser test"
    { $SUDO apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${browser[@]}" >/dev/null; } ||
      echo "test: could not install ${browser[*]}; the browser test will skip"
  fi
fi
BUILD_DIR=${BUILD_DIR:-build}
# ctest runs tests side by side, each a process whose LibTorch OpenMP threads spin while they wait (GNU OpenMP's
# default): on 2 cores two such processes starve each other. Idle threads sleep instead; results are unchanged. The
# PyPI suite took 167 s instead of about 700 (its two slowest tests side by side: 166 s spinning, 31 s sleeping).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
start=$(date +%s)
# One ctest test per GoogleTest suite (tests/ctest_suites.cmake); the tests a suite skipped, each with its reason, are
# listed after the summary from ctest's log, as ctest listed them when each test was its own.
status=0
(cd "$BUILD_DIR" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 900) || status=$?
awk '/: Skipped$/ { getline reason; next }
     /^\[  SKIPPED \] [^ ]+ \([0-9]+ ms\)$/ { print "tests: skipped " $4 ": " reason; reason = "" }' \
  "$BUILD_DIR/Testing/Temporary/LastTest.log" 2>/dev/null || true
echo "tests: done in $(( $(date +%s) - start ))s"
exit "$status"
