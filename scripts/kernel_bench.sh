#!/usr/bin/env bash
# Each of attnmt's CPU kernels against its reference, and the matrix products through the BLAS, the packed kernel
# (AVX-512 CPUs) and oneDNN, at the benchmark model's shapes, in one process (scripts/kernel_bench.cpp): the
# measurement behind src/kernels/README.md. Installs Debian's libdnnl-dev if missing (oneDNN, the library LibTorch
# loads; attnmt itself does not link it) and builds kernel-bench in build/.
#   scripts/kernel_bench.sh [REPS]     one JSON object on stdout (REPS, default 10: best of that many)
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-10}
[[ $REPS =~ ^[1-9][0-9]*$ ]] || { echo "kernel_bench: REPS must be a positive integer, got '$REPS'" >&2; exit 2; }
if ! dpkg-query -W -f='${Status}' libdnnl-dev 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q libdnnl-dev >&2
fi
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DATTNMT_KERNEL_BENCH=ON >/dev/null
cmake --build "$BUILD_DIR" --target kernel-bench -j "$(nproc)" >&2
"$BUILD_DIR/kernel-bench" "$REPS"
