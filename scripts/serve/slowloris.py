#!/usr/bin/env python3
"""A slowloris: N connections to an HTTP server, each sending one more header byte every EVERY seconds and never
finishing its request; a connection the server cuts is opened again at once.

    scripts/serve/slowloris.py PORT [N=70] [EVERY=3]     runs until SIGTERM/SIGINT, then prints what the server cut
                                                         (SIGUSR1: prints it now, and stops counting)

scripts/serve_load.sh runs one beside its load; scripts/serve/probe.py uses the class.
"""
import signal
import socket
import sys
import threading
import time


class Slowloris:
    def __init__(self, port, n=70, every=3.0, host="127.0.0.1"):
        self.host, self.port, self.n, self.every = host, port, n, every
        self.done, self.cut, self.failed = False, 0, 0
        self.socks = []
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def open(self):
        s = socket.create_connection((self.host, self.port))
        s.sendall(f"POST /translator/translate HTTP/1.1\r\nHost: {self.host}\r\nX-Slow: ".encode())
        s.setblocking(False)
        return s

    def alive(self, s):
        try:
            return s.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            return True
        except OSError:
            return False

    def run(self):
        self.socks = [self.open() for _ in range(self.n)]
        while not self.done:
            for i, s in enumerate(self.socks):
                try:
                    if self.alive(s):
                        s.send(b"x")
                        continue
                except OSError:
                    pass
                self.cut += 1
                s.close()
                try:
                    self.socks[i] = self.open()
                except OSError:
                    self.failed += 1
            deadline = time.time() + self.every
            while not self.done and time.time() < deadline:
                time.sleep(0.05)

    def stop(self):
        self.done = True
        self.t.join()
        for s in self.socks:
            s.close()


if __name__ == "__main__":
    port = int(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 70
    every = float(sys.argv[3]) if len(sys.argv) > 3 else 3.0
    stop = threading.Event()
    start = time.time()
    said = []

    def say(*_):
        if not said:
            said.append(1)
            print(f"slowloris: {n} connections, a byte every {every:g} s for {time.time() - start:.0f} s: {slow.cut} cut by the "
                  f"server (and opened again), {slow.failed} could not reconnect", flush=True)

    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    signal.signal(signal.SIGUSR1, say)
    slow = Slowloris(port, n, every)
    stop.wait()
    slow.stop()
    say()
