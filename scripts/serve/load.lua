-- wrk script for scripts/serve_load.sh: each request is one sentence of $SERVE_SENTENCES (in turn) for model 100,
-- greedy, in OpenNMT-py's request shape; done() prints one summary line that the script parses.
local lines = {}
for l in io.lines(os.getenv("SERVE_SENTENCES")) do
  if #l > 0 then lines[#lines + 1] = l end
end
local function esc(s)
  return (s:gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end))
end
local i = 0
local beam = os.getenv("SERVE_BEAM") or "1"
request = function()
  i = i % #lines + 1
  local body = '[{"src": "' .. esc(lines[i]) .. '", "id": 100, "beam_size": ' .. beam .. '}]'
  return wrk.format("POST", "/translator/translate", {["Content-Type"] = "application/json"}, body)
end
done = function(summary, latency, requests)
  io.write(string.format(
    "wrk-summary requests=%d duration_us=%d non2xx=%d connect=%d read=%d write=%d timeout=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration, summary.errors.status, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.timeout, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.max))
end
