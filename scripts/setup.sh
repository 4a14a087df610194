#!/usr/bin/env bash
# Installs attnmt's build dependencies from Debian packages, on Debian 12 (LibTorch 1.13) or Debian 13 (LibTorch 2.6),
# idempotent and fast when all is there, and makes sure the active BLAS is OpenBLAS (about 50x faster than the
# reference BLAS here).
#   scripts/setup.sh            the Debian packages
#   scripts/setup.sh --pytorch  also PyPI's torch (pinned below, its default CUDA build) in a virtual environment,
#                               .venv-pytorch/ (git ignores it; ATTNMT_PYTORCH_VENV moves it), for
#                               scripts/build.sh --pytorch. Building against it needs the CUDA toolkit (nvcc).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTORCH=0
for a in "$@"; do
  case "$a" in
    --pytorch) PYTORCH=1 ;;
    *) echo "usage: scripts/setup.sh [--pytorch]" >&2; exit 2 ;;
  esac
done
# torch 2.14.1 is the newest release whose default wheel is built with CUDA 13.0, the toolkit these machines have
# (2.15 moved to 13.2); its LibTorch is what `pip install torch` gives a GPU user.
PYTORCH_PIN=${ATTNMT_PYTORCH_PIN:-torch==2.14.1}

# libgloo-dev: Gloo's headers, which LibTorch's c10d needs for distributed training (attnmt train --nproc).
# libtcmalloc-minimal4: the allocator attnmt links (CMakeLists.txt says why: page faults on every step).
# libsentencepiece-dev + pkg-config: subword units (data.tokenizer "sentencepiece"), trained and applied in-process.
# libboost-dev: Boost.Beast and Boost.Asio (headers only), the HTTP server of `attnmt serve` (docs/serve.md says why).
# Debian 13 renamed some libraries in its 64-bit time_t transition (libtcmalloc-minimal4 -> ...4t64).
debian=$(. /etc/os-release 2>/dev/null && echo "${VERSION_ID:-}")
tcmalloc=libtcmalloc-minimal4
if [ -n "$debian" ] && [ "$debian" -ge 13 ] 2>/dev/null; then tcmalloc=libtcmalloc-minimal4t64; fi
PACKAGES=(cmake g++ make ccache pkg-config libtorch-dev libcli11-dev libspdlog-dev nlohmann-json3-dev libgtest-dev libopenblas0-pthread
          libgloo-dev "$tcmalloc" libsentencepiece-dev libboost-dev)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} packages already installed"
fi

# Point libblas.so.3 / liblapack.so.3 at OpenBLAS if something else is active.
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
for lib in libblas.so.3 liblapack.so.3; do
  alt="${lib}-${arch}"
  want="/usr/lib/${arch}/openblas-pthread/${lib}"
  current=$(update-alternatives --query "$alt" 2>/dev/null | awk '/^Value:/ {print $2}')
  if [ -z "$current" ]; then
    echo "setup: no alternative $alt registered; skipping"
  elif [ "$current" != "$want" ] && [ -e "$want" ]; then
    $SUDO update-alternatives --set "$alt" "$want"
    echo "setup: $alt -> $want (was $current)"
  else
    echo "setup: $alt -> $current"
  fi
done

if [ "$PYTORCH" = 1 ]; then
  venv=${ATTNMT_PYTORCH_VENV:-$PWD/.venv-pytorch}
  want=${PYTORCH_PIN#torch==}
  have=$("$venv/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
  if [ "$have" = "$want" ]; then
    echo "setup: PyPI torch $have already in $venv"
  else
    command -v nvcc >/dev/null || echo "setup: warning: no nvcc on PATH; building against a CUDA LibTorch needs the CUDA toolkit" >&2
    python3 -m venv "$venv"
    start=$(date +%s)
    # python -m pip, not bin/pip: a venv that was moved keeps a working python but not bin/pip's first line.
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "$PYTORCH_PIN"
    echo "setup: PyPI $PYTORCH_PIN installed in $venv in $(( $(date +%s) - start ))s"
  fi
fi
