#!/usr/bin/env bash
# The README's test command: set up, build (Release), run every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
start=$(date +%s)
(cd "$BUILD_DIR" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 900)
echo "tests: done in $(( $(date +%s) - start ))s"
