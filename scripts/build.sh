#!/usr/bin/env bash
# Configures and builds attnmt (Release) in build/ (or $BUILD_DIR). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
start=$(date +%s)
cmake --build "$BUILD_DIR" -j "$JOBS"
echo "build: done in $(( $(date +%s) - start ))s ($BUILD_DIR)"
