#!/usr/bin/env python3
"""The hostile- and careless-client probes of issue #48, run against a running `attnmt serve` with its default limits.

    scripts/serve/probe.py PORT PID WORD_MODEL_ID SPM_MODEL_ID

One line per probe: what the server answered, how long it took, and the server's peak RSS during the probe (sampled
from /proc/PID/status every 50 ms). The last probe sends SIGTERM during a slowloris and times the exit.
scripts/serve_probe.sh starts the server and trains the two small runs it needs.
"""
import json
import os
import select
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from slowloris import Slowloris  # noqa: E402

PORT, PID, WORD, SPM = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
HOST = "127.0.0.1"


def rss_mb():
    try:
        with open(f"/proc/{PID}/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Peak:
    """The peak RSS while the with-block runs."""

    def __enter__(self):
        self.peak, self.done = rss_mb(), False
        self.t = threading.Thread(target=self.sample, daemon=True)
        self.t.start()
        return self

    def sample(self):
        while not self.done:
            self.peak = max(self.peak, rss_mb())
            time.sleep(0.05)

    def __exit__(self, *a):
        self.done = True
        self.t.join()


def connect(timeout=30):
    s = socket.create_connection((HOST, PORT), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_all(s):
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except OSError:
        pass
    return out


def status_of(raw):
    try:
        return int(raw.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def message_of(raw):
    body = raw.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in raw else b""
    try:
        j = json.loads(body)
        return j.get("error", "") if isinstance(j, dict) else "(a JSON list)"
    except ValueError:
        return body[:80].decode(errors="replace")


def request(method, path, body=b"", headers=None, timeout=60):
    h = {"Host": f"{HOST}:{PORT}", "Connection": "close"}
    if body or method == "POST":
        h.setdefault("Content-Type", "application/json")
        h["Content-Length"] = str(len(body))
    h.update(headers or {})
    s = connect(timeout)
    s.sendall(f"{method} {path} HTTP/1.1\r\n".encode() + b"".join(f"{k}: {v}\r\n".encode() for k, v in h.items()) + b"\r\n" + body)
    raw = read_all(s)
    s.close()
    return raw


def translate(items, **kw):
    return request("POST", "/translator/translate", json.dumps(items).encode(), **kw)


def report(name, before, raw, secs, peak, extra=""):
    msg = message_of(raw)
    print(f"{name}: {before} -> now HTTP {status_of(raw)} in {secs:.2f} s{(' (' + msg[:110] + ')') if msg else ''}; "
          f"peak RSS {peak:.0f} MB{extra}", flush=True)


def timed(fn):
    t = time.time()
    with Peak() as p:
        raw = fn()
    return raw, time.time() - t, p.peak


def probe_requests():
    word = "a" * 4000
    raw, s, pk = timed(lambda: translate([{"src": " ".join([word] * 200), "id": SPM}]))
    report("1a piece explosion (200 words of 4,000 characters, SentencePiece run)", "800,200 pieces, RSS to 18 GB, 503 for all", raw, s, pk)
    wide = "\u3000".join(["tok"] * 3000)
    raw, s, pk = timed(lambda: translate([{"src": wide, "id": WORD}] * 8))
    report("1b 8 x 3,000 tokens split by U+3000 (word-level run)", "503 for everyone for over 60 s", raw, s, pk)
    long = " ".join(["the cat"] * 100)
    raw, s, pk = timed(lambda: translate([{"src": long, "id": WORD, "beam_size": 32, "n_best": 32, "attention": True}] * 64))
    report("1c 64 x 200 words, beam 32, n_best 32, attention", "held the model ~70 s at 2.9 GB", raw, s, pk)
    # The largest request the limits let through: what one request can cost now.
    most = [{"src": " ".join(["the cat"] * 8), "id": WORD, "beam_size": 32}] * 64
    raw, s, pk = timed(lambda: translate(most))
    report("1d the costliest request within the limits (64 x 16 tokens, beam 32)", "(no such bound)", raw, s, pk)
    # A client that leaves mid-decode, then the next request.
    c = connect()
    body = json.dumps(most).encode()
    c.sendall(b"POST /translator/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(0.2)
    c.close()
    raw, s, pk = timed(lambda: translate([{"src": "the cat", "id": WORD}]))
    report("1e the next request after a client left mid-decode", "waited 60 s for a 503", raw, s, pk)


def bomb(name, before, n, make, total):
    """n connections, each sending what make() yields until `total` bytes or the server closes."""
    results = [None] * n

    def one(i):
        s = connect()
        sent = 0
        try:
            for chunk in make():
                s.sendall(chunk)
                sent += len(chunk)
                if sent >= total or select.select([s], [], [], 0)[0]:  # the answer has come: stop sending
                    break
        except OSError:
            pass
        raw = read_all(s)
        s.close()
        results[i] = (status_of(raw), sent, message_of(raw))

    t = time.time()
    with Peak() as p:
        ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        [x.start() for x in ts]
        [x.join() for x in ts]
    statuses = sorted({r[0] for r in results})
    sent = max(r[1] for r in results)
    print(f"{name}: {before} -> now HTTP {statuses} in {time.time() - t:.2f} s, at most {sent / 1e6:.2f} MB sent per connection "
          f"before its answer came ({results[0][2][:80]}); peak RSS {p.peak:.0f} MB", flush=True)


def header_lines():
    yield b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    line = b"X-Filler: " + b"a" * 1000 + b"\r\n"
    while True:
        yield line * 64


def chunked():
    yield b"POST /translator/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"100000\r\n" + b" " * 0x100000 + b"\r\n"
    while True:
        yield chunk


def probe_manners():
    s = connect()
    body = json.dumps([{"src": "the cat", "id": WORD}]).encode()
    s.sendall(b"POST /translator/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(body)).encode() + b"\r\n\r\n" + body)
    s.shutdown(socket.SHUT_WR)
    raw = read_all(s)
    s.close()
    print(f"4a half-closed client: no reply -> now HTTP {status_of(raw)}", flush=True)
    s = connect()
    get = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    s.sendall(get + get + b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    raw = read_all(s)
    s.close()
    print(f"4b three pipelined requests: the first answered, the rest dropped -> now {raw.count(b'HTTP/1.1 200')} answered", flush=True)
    raw = request("GET", "/translator/translate")
    print(f"4c wrong method: 404 'no such path' -> now HTTP {status_of(raw)} ({message_of(raw)})", flush=True)
    t = time.time()
    s = connect()
    s.sendall(b"POST /translator/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: -1\r\n\r\n[]")
    raw = read_all(s)
    s.close()
    print(f"4d Content-Length: -1: 413 after 7 s -> now HTTP {status_of(raw)} in {time.time() - t:.2f} s ({message_of(raw)})", flush=True)
    raw = request("POST", "/translator/translate", b'[{"src": "the\x00cat"}]')
    print(f"4e a raw NUL in the body: the rest ignored -> now HTTP {status_of(raw)} ({message_of(raw)[:70]})", flush=True)
    raw = request("POST", "/translator/translate", body, headers={"Content-Type": "text/plain"})
    print(f"4f text/plain body: accepted -> now HTTP {status_of(raw)}", flush=True)
    raw = request("GET", "/models", headers={"Host": "evil.example"})
    print(f"4g Host: evil.example: accepted -> now HTTP {status_of(raw)}", flush=True)
    raw = request("GET", "/models")
    print(f"4h /models discloses absolute paths: yes -> now {'yes' if b'/tmp' in raw or b'/work' in raw else 'no'}", flush=True)


def probe_slow():
    slow = Slowloris(PORT, 70)
    time.sleep(1)
    lat = []
    for _ in range(10):
        t = time.time()
        raw = translate([{"src": "the cat", "id": WORD}], timeout=30)
        lat.append((time.time() - t, status_of(raw)))
        time.sleep(1.5)
    print(f"2a a normal request while 70 clients trickle a byte every 3 s: timed out at 20 s -> now "
          f"{sum(1 for _, st in lat if st == 200)}/10 answered 200, slowest {max(x for x, _ in lat):.3f} s; "
          f"{slow.cut} trickling connections cut by the 10 s request deadline so far", flush=True)
    t = time.time()
    os.kill(PID, signal.SIGTERM)
    while True:
        try:
            os.kill(PID, 0)
        except ProcessLookupError:
            break
        try:
            if open(f"/proc/{PID}/stat").read().split()[2] == "Z":
                break
        except OSError:
            break
        time.sleep(0.02)
    print(f"2b SIGTERM while 70 clients trickle: still running 45 s later -> now gone in {time.time() - t:.2f} s", flush=True)
    slow.stop()


print(f"serve probes against 127.0.0.1:{PORT} (pid {PID}, RSS {rss_mb():.0f} MB at the start; defaults of `attnmt serve`)", flush=True)
probe_requests()
bomb("3a header bomb: 8 connections x 250 MB of header lines", "200, RSS 358 -> 3,141 MB", 8, header_lines, 250_000_000)
bomb("3b chunked bomb: 4 x 300 MB chunked bodies", "buffered whole, then 413; RSS 187 -> 2,213 MB", 4, chunked, 300_000_000)
probe_manners()
probe_slow()
