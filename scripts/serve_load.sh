#!/usr/bin/env bash
# Load on `attnmt serve`: wrk (Debian's package) with 32 connections posts one test sentence per request, greedy, for
# SECONDS seconds, while the server's RSS is sampled every second; then the same with --max-batch 1 (every request
# decoded alone) to show what batching across requests is worth. Prints requests/s (= sentences/s), latency
# percentiles, failures (connection errors and non-2xx answers) and RSS at the start, the end and the peak. Between the
# two, the batched load again beside a slowloris (SLOW clients each sending a header byte every 3 s, reconnecting when
# cut), ended by SIGTERM while they trickle: how long the server takes to exit.
#   scripts/serve_load.sh RUN_DIR [SENTENCES_FILE]     e.g. scripts/serve_load.sh runs/demo/bahdanau data/toy/test.en
#   CONNECTIONS=32 DURATION=40 (seconds each) BEAM=1 PORT=5077 WRK_THREADS=1 SLOW=70
set -euo pipefail
cd "$(dirname "$0")/.."
RUN=${1:?usage: scripts/serve_load.sh RUN_DIR [SENTENCES_FILE]}
SENT=${2:-data/toy/test.en}
CONNECTIONS=${CONNECTIONS:-32}
SECONDS_EACH=${DURATION:-40}
BEAM=${BEAM:-1}
PORT=${PORT:-5077}
command -v wrk >/dev/null || { echo "serve_load: needs wrk (apt-get install wrk)" >&2; exit 2; }
[ -x build/attnmt ] || bash scripts/build.sh
tmp=$(mktemp -d)
trap 'kill $(cat "$tmp"/pid 2>/dev/null) 2>/dev/null || true; rm -rf "$tmp"' EXIT

one() {  # $1: label, $2: slow clients beside the load (0: none), then extra serve flags
  local label=$1 slow=$2
  shift 2
  build/attnmt --log-level warn serve --run "$RUN" --port "$PORT" "$@" >"$tmp/serve.log" 2>&1 &
  local pid=$!
  echo $pid >"$tmp/pid"
  for _ in $(seq 1 600); do grep -q "serving" "$tmp/serve.log" && break; sleep 0.1; done
  grep -q "serving" "$tmp/serve.log" || { cat "$tmp/serve.log" >&2; exit 1; }
  # 10 s of warm-up (the allocator and the decoder reach their working set), then the RSS the run starts from.
  SERVE_SENTENCES=$SENT SERVE_BEAM=$BEAM wrk -t1 -c"$CONNECTIONS" -d10s -s scripts/serve/load.lua "http://127.0.0.1:$PORT" >/dev/null
  local rss0
  rss0=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
  ( while kill -0 $pid 2>/dev/null; do awk '/VmRSS/ {print $2}' /proc/$pid/status 2>/dev/null; sleep 1; done ) >"$tmp/rss" &
  local sampler=$! slowpid=""
  if [ "$slow" -gt 0 ]; then
    python3 scripts/serve/slowloris.py "$PORT" "$slow" 3 >"$tmp/slow.txt" &
    slowpid=$!
    sleep 2
  fi
  SERVE_SENTENCES=$SENT SERVE_BEAM=$BEAM wrk -t"${WRK_THREADS:-1}" -c"$CONNECTIONS" -d"${SECONDS_EACH}s" --timeout 30s --latency \
    -s scripts/serve/load.lua "http://127.0.0.1:$PORT" >"$tmp/wrk.txt"
  local rss1 health
  rss1=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
  health=$(python3 -c "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:$PORT/health').read().decode())")
  local t0 stopped
  if [ -n "$slowpid" ]; then kill -USR1 $slowpid; sleep 0.2; fi  # what the deadline cut, before the stop closes the rest
  t0=$(date +%s.%N)
  kill -TERM $pid
  wait $pid || { echo "serve_load: the server exited with $? after SIGTERM" >&2; exit 1; }
  stopped=$(python3 -c "print(f'{$(date +%s.%N) - $t0:.2f}')")
  if [ -n "$slowpid" ]; then
    kill -TERM $slowpid
    wait $slowpid || true
    echo "  $(cat "$tmp/slow.txt"); SIGTERM during it: the server exited 0 in $stopped s"
  fi
  kill $sampler 2>/dev/null || true
  local peak
  peak=$(sort -n "$tmp/rss" | tail -1)
  python3 - "$label" "$tmp/wrk.txt" "$rss0" "$rss1" "${peak:-$rss1}" "$health" <<'PY'
import json, re, sys
label, wrk, rss0, rss1, peak, health = sys.argv[1], open(sys.argv[2]).read(), *map(int, sys.argv[3:6]), json.loads(sys.argv[6])
m = dict(re.findall(r"(\w+)=(\d+)", wrk.split("wrk-summary", 1)[1]))
m = {k: int(v) for k, v in m.items()}
secs = m["duration_us"] / 1e6
fails = m["non2xx"] + m["connect"] + m["read"] + m["write"] + m["timeout"]
batch = health["sentences"] / max(1, health["batches"])
print(f"{label}: {m['requests']} requests in {secs:.1f} s = {m['requests'] / secs:.0f} sentences/s; latency p50 {m['p50_us'] / 1e3:.1f} ms, "
      f"p90 {m['p90_us'] / 1e3:.1f} ms, p99 {m['p99_us'] / 1e3:.1f} ms, max {m['max_us'] / 1e3:.1f} ms; failed {fails} "
      f"(non-2xx {m['non2xx']}, socket {fails - m['non2xx']}); {batch:.1f} sentences per decoded batch; "
      f"RSS {rss0 / 1024:.1f} MB after warm-up, {rss1 / 1024:.1f} MB at the end, peak {peak / 1024:.1f} MB")
PY
}

echo "serve_load: $RUN, $CONNECTIONS connections, ${SECONDS_EACH} s each, beam $BEAM, sentences from $SENT ($(nproc) cores)"
one "batched (--max-batch 64)" 0
one "batched, beside a slowloris of ${SLOW:-70} clients" "${SLOW:-70}"
one "unbatched (--max-batch 1)" 0 --max-batch 1
