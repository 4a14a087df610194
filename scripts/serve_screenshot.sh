#!/usr/bin/env bash
# The page of `attnmt serve` as a user sees it, in headless Chromium (Debian's chromium): serves the runs, opens
# /?src=SENTENCE (the page translates it on load with every model) and writes a PNG.
#   scripts/serve_screenshot.sh OUT.png "SENTENCE" RUN_DIR [RUN_DIR ...]
# e.g. scripts/serve_screenshot.sh docs/serve/page.png "$(sed -n 5p data/toy/test.en)" runs/demo/none runs/demo/bahdanau
# EXTRA='&explain=3&part=decoder&layer=1' adds to the page's address (there: each model's explanation of step 3 opens).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/serve_screenshot.sh OUT.png SENTENCE RUN_DIR...}
SENTENCE=${2:?sentence}
shift 2
command -v chromium >/dev/null || { echo "serve_screenshot: needs chromium (apt-get install chromium)" >&2; exit 2; }
PORT=${PORT:-5078}
runs=()
for r in "$@"; do runs+=(--run "$r"); done
log=$(mktemp)
build/attnmt --log-level warn serve "${runs[@]}" --port "$PORT" >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 600); do grep -q serving "$log" && break; sleep 0.1; done
url="http://127.0.0.1:$PORT/?src=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$SENTENCE")&beam=${BEAM:-5}&nbest=${NBEST:-3}${EXTRA:-}"
mkdir -p "$(dirname "$OUT")"
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size="${WINDOW:-1280,1150}" \
  --virtual-time-budget=15000 --screenshot="$OUT" "$url" >/dev/null 2>&1
echo "wrote $OUT ($url)"
