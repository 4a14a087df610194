#!/usr/bin/env bash
# Configures and builds attnmt (Release). Extra arguments go to cmake.
#   scripts/build.sh            against Debian's LibTorch, in build/ (or $BUILD_DIR)
#   scripts/build.sh --pytorch  against the LibTorch inside PyPI's torch (scripts/setup.sh --pytorch installs it;
#                               CUDA compiled in), in build-pytorch/ (or $BUILD_DIR); without .venv-pytorch, the
#                               torch of the machine's python3. ATTNMT_DEPS=DIR: scripts/vendor_deps.sh's folder
#   TARGETS="attnmt"            build only these targets (scripts/demo.sh builds the CLI alone, not the tests)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTORCH=0
if [ "${1:-}" = "--pytorch" ]; then PYTORCH=1; shift; fi
JOBS=${JOBS:-$(nproc)}
extra=()
if [ "$PYTORCH" = 1 ]; then
  BUILD_DIR=${BUILD_DIR:-build-pytorch}
  venv=${ATTNMT_PYTORCH_VENV:-$PWD/.venv-pytorch}
  # The project's environment, else the machine's own Python (a GPU machine with PyTorch installed).
  py="$venv/bin/python"
  [ -x "$py" ] || py=python3
  prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) || {
    echo "build: no PyPI torch in $venv nor in $(command -v python3) (run scripts/setup.sh --pytorch first)" >&2; exit 2; }
  # Its lib/ first, so that LibTorch's config finds its own libraries before Debian's in /usr/lib.
  extra+=("-DCMAKE_PREFIX_PATH=$prefix;$(dirname "$(dirname "$prefix")")")
  if [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export CUDACXX=/usr/local/cuda/bin/nvcc; fi
fi
BUILD_DIR=${BUILD_DIR:-build}
# A machine with ninja and no make (a GPU machine's image can be such): Ninja, unless the folder was configured already.
if ! command -v make >/dev/null && command -v ninja >/dev/null && [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  extra+=(-G Ninja)
fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${extra[@]}" "$@" >"$BUILD_DIR.configure.log" 2>&1 || {
  cat "$BUILD_DIR.configure.log" >&2; exit 1; }
grep "^-- attnmt:" "$BUILD_DIR.configure.log" || true
start=$(date +%s)
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$JOBS" "${targets[@]}"
echo "build: done in $(( $(date +%s) - start ))s ($BUILD_DIR)"
