#!/usr/bin/env bash
# Puts the Debian packages attnmt builds with, besides LibTorch, into deps/ (git ignores it; 11 MB): CLI11, spdlog and
# fmt, nlohmann-json, GoogleTest, SentencePiece, unpacked from Debian 12's .debs. For a machine that has PyTorch, CMake
# and a compiler but none of these and no network (the GPU machine scripts/gpu_check.sh runs on): carry deps/ there
# and build with ATTNMT_DEPS=$PWD/deps scripts/build.sh --pytorch (build.sh passes it to CMake).
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES=(libcli11-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 nlohmann-json3-dev libgtest-dev libsentencepiece-dev
          libsentencepiece0)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download "${PACKAGES[@]}" >/dev/null 2>&1) || {
  apt-get update -q >/dev/null && (cd "$work" && apt-get download "${PACKAGES[@]}" >/dev/null); }
rm -rf deps.tmp
mkdir -p deps.tmp
for d in "$work"/*.deb; do dpkg-deb -x "$d" deps.tmp; done
rm -rf deps.tmp/usr/share/doc deps.tmp/usr/src
rm -rf deps
mv deps.tmp deps
echo "vendor_deps: ${#PACKAGES[@]} packages in deps/ ($(du -sh deps | cut -f1))"
