#!/usr/bin/env bash
# The probes of issue #48 (a hostile or careless client), re-run against `attnmt serve` with its default limits: a
# SentencePiece piece explosion, requests that would hold the model for minutes, a client that leaves mid-decode, header
# and chunked-body bombs, HTTP manners, a slowloris, and SIGTERM during it. Each line says what the server did before
# (the issue's figures) and does now, with the time and the server's peak RSS. docs/serve.md keeps the figures.
#   scripts/serve_probe.sh            trains two small runs on data/toy (word-level and SentencePiece; seconds), serves both
set -euo pipefail
cd "$(dirname "$0")/.."
PORT=${PORT:-5079}
[ -x build/attnmt ] || bash scripts/build.sh
tmp=$(mktemp -d)
trap 'kill -9 $(cat "$tmp"/pid 2>/dev/null) 2>/dev/null || true; rm -rf "$tmp"' EXIT
train() {  # $1: run dir, then --set flags
  local dir=$1
  shift
  build/attnmt --log-level warn train -c configs/bahdanau.json --set run_dir="$dir" --set train.max_steps=40 --set train.epochs=1 "$@" >/dev/null
}
train "$tmp/word"
train "$tmp/spm" --set data.tokenizer=sentencepiece --set data.spm.vocab_size=200
build/attnmt --log-level warn serve --run "$tmp/word" --run "$tmp/spm" --port "$PORT" >"$tmp/serve.log" 2>&1 &
echo $! >"$tmp/pid"
for _ in $(seq 1 600); do grep -q "serving" "$tmp/serve.log" && break; sleep 0.1; done
grep -q "serving" "$tmp/serve.log" || { cat "$tmp/serve.log" >&2; exit 1; }
python3 scripts/serve/probe.py "$PORT" "$(cat "$tmp/pid")" 100 101
wait "$(cat "$tmp/pid")" && echo "serve_probe: the server exited 0" || echo "serve_probe: the server exited with $?"
