#!/usr/bin/env bash
# Runs the README's test command, scripts/test.sh, on Debian 13 (trixie: LibTorch 2.6, g++ 14) in a Debian 13 root
# made with debootstrap, as a user on the current Debian stable would meet attnmt. Needs root (debootstrap, chroot,
# mounts) and Debian's mirror.
#   scripts/debian13.sh             make the root if it is not there (about a minute), copy this checkout's files
#                                   into it, run scripts/test.sh inside
#   ATTNMT_DEBIAN13_ROOT=DIR        where the root lives (default /var/cache/attnmt/debian13): kept between runs, so
#                                   that its packages and its ccache are reused; delete it to start afresh
# ../shared (corpora) is mounted read-only beside the copy, where the tests look for it.
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
ROOT=${ATTNMT_DEBIAN13_ROOT:-/var/cache/attnmt/debian13}
MIRROR=${ATTNMT_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ "$(id -u)" -ne 0 ]; then echo "debian13: needs root (debootstrap, chroot, mount)" >&2; exit 2; fi

if [ ! -x "$ROOT/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap; }
  start=$(date +%s)
  rm -rf "$ROOT.tmp"
  mkdir -p "$(dirname "$ROOT")"
  debootstrap --variant=minbase trixie "$ROOT.tmp" "$MIRROR" >/dev/null
  rm -rf "$ROOT"
  mv "$ROOT.tmp" "$ROOT"
  echo "debian13: made a Debian 13 root in $ROOT in $(( $(date +%s) - start ))s"
else
  echo "debian13: reusing the Debian 13 root in $ROOT"
fi
grep -q '^VERSION_ID="13"' "$ROOT/etc/os-release" || { echo "debian13: $ROOT is not a Debian 13 root" >&2; exit 1; }
cp /etc/resolv.conf "$ROOT/etc/resolv.conf" 2>/dev/null || true

# This checkout's files (tracked, and untracked ones git does not ignore), never its builds.
work="$ROOT/work"
mkdir -p "$work/attnmt" "$work/shared"
find "$work/attnmt" -mindepth 1 -maxdepth 1 ! -name 'build' -exec rm -rf {} +
git ls-files -z -co --exclude-standard | tar -C "$SRC" --null -T - -cf - | tar -C "$work/attnmt" -xf -

mounted=()
cleanup() {
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
mount_into() {  # mount_into TARGET ARGS...
  local target=$1
  shift
  mount "$@" "$target"
  mounted+=("$target")
}
mount_into "$ROOT/proc" -t proc proc
mount_into "$ROOT/sys" --rbind /sys
mount_into "$ROOT/dev" --rbind /dev
mkdir -p "$ROOT/dev/shm"
if [ -d "$SRC/../shared" ]; then
  mount_into "$work/shared" --bind "$SRC/../shared"
  mount -o remount,bind,ro "$work/shared" 2>/dev/null || true
fi

chroot "$ROOT" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  CCACHE_DIR=/root/.ccache JOBS="${JOBS:-$(nproc)}" \
  bash -c 'set -e; cd /work/attnmt; echo "debian13: $(. /etc/os-release; echo "$PRETTY_NAME")"; bash scripts/test.sh'
