#!/usr/bin/env bash
# Installs attnmt's build dependencies from Debian 12 packages (idempotent, fast when all is there)
# and makes sure the active BLAS is OpenBLAS (about 50x faster than the reference BLAS here).
set -euo pipefail

# libgloo-dev: Gloo's headers, which LibTorch's c10d needs for distributed training (attnmt train --nproc).
# libtcmalloc-minimal4: the allocator attnmt links (CMakeLists.txt says why: page faults on every step).
# libsentencepiece-dev + pkg-config: subword units (data.tokenizer "sentencepiece"), trained and applied in-process.
PACKAGES=(cmake g++ make ccache pkg-config libtorch-dev libcli11-dev libspdlog-dev nlohmann-json3-dev libgtest-dev libopenblas0-pthread
          libgloo-dev libtcmalloc-minimal4 libsentencepiece-dev)

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
