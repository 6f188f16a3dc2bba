#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How long a clean stop takes, from SIGTERM to the daemon's exit, with a client pool's idle
connections open (issue #30: a restart waited for every idle connection's EOF, 2 s).

    bench/stop-latency.py [--divvyd PATH] [--rules FILE] [--connections N] [--runs N]

Each run starts divvyd on a fresh temporary database and a free loopback port, opens N TCP
connections that each send one HIT and read its reply (then sit idle, held open, as a pool's
do), sends SIGTERM and times the exit. The same with no client connected, for reference.
Prints every run and the medians. Loopback only; bounded in count and time."""

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REQUEST = b"HIT method=GET path=/bench ip=10.0.0.1\n"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(divvyd, rules, tmp):
    port = free_port()
    cmd = [divvyd, "--db", os.path.join(tmp, "db"), "--listen", "tcp:127.0.0.1:%d" % port, rules]
    if os.geteuid() == 0:
        cmd.insert(1, "--allow-root")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                sys.exit("divvyd exited at start (status %s)" % proc.returncode)
            time.sleep(0.05)
    proc.kill()
    sys.exit("divvyd did not listen within 30 s")


def one_run(divvyd, rules, n):
    tmp = tempfile.mkdtemp(prefix="divvyd-stop-")
    proc = None
    conns = []
    try:
        proc, port = start(divvyd, rules, tmp)
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(REQUEST)
            if not s.recv(256).startswith(b"OK "):
                sys.exit("unexpected reply")
            conns.append(s)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
        elapsed = time.monotonic() - t0
        if rc != 0:
            sys.exit("divvyd exited with status %d" % rc)
        return elapsed
    finally:
        for s in conns:
            s.close()
        if proc and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--divvyd", default=os.path.join(HERE, "..", "src", "divvyd"))
    ap.add_argument("--rules", default=os.path.join(HERE, "divvyd-bench.ini"))
    ap.add_argument("--connections", type=int, default=100)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    if not 1 <= a.runs <= 50 or not 0 <= a.connections <= 10000:
        sys.exit("--runs 1..50, --connections 0..10000")
    for n in (0, a.connections):
        times = []
        for i in range(a.runs):
            t = one_run(a.divvyd, a.rules, n)
            times.append(t)
            print("%4d idle connections, run %d: SIGTERM to exit %.3f s" % (n, i + 1, t))
        print("%4d idle connections: median %.3f s, max %.3f s (%d runs)" %
              (n, statistics.median(times), max(times), a.runs))


if __name__ == "__main__":
    main()
