#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""divvyd under load: pipelining, many concurrent clients, slow and stuck clients.

Correctness only (order, exact counts); timing belongs in the benchmarks.
Run one test:  tests/integration/test_load.py Load.test_concurrent_clients
"""

import itertools
import os
import select
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import data_path  # noqa: E402

_ids = itertools.count(1)


def uid(prefix):
    return "%s-%d-%d" % (prefix, os.getpid(), next(_ids))


class Load(harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = cls.start_shared_daemon(data_path("itest.ini"))

    def _pipeline(self, kind, n):
        u = uid("pipe-" + kind)
        with self.d.connect(kind) as c:
            replies = c.pipeline(["HIT path=/big user=" + u] * n)
        self.assertEqual(len(replies), n)
        # In order: the credit goes down by exactly one per request.
        credits = [harness.parse_ok(r) for r in replies]
        self.assertNotIn(None, credits, [r for r in replies if not harness.parse_ok(r)][:5])
        self.assertEqual([c[1] for c in credits], list(range(99999, 99999 - n, -1)))
        self.assertWindow(replies, 100000, 3600)

    def test_pipelining_tcp(self):
        self._pipeline("tcp", 6000)

    def test_pipelining_unix(self):
        self._pipeline("unix", 5000)

    def test_pipelining_interleaved_counters(self):
        # Distinct counters interleaved in one write: each reply belongs to its own request.
        users = [uid("il") for _ in range(5)]
        lines = []
        for i in range(1000):
            lines.append("HIT path=/big user=" + users[i % 5])
            lines.append("HIT path=/open")
        with self.d.connect("tcp") as c:
            replies = c.pipeline(lines)
        self.assertEqual(len(replies), len(lines))
        for i in range(1000):
            self.assertHit(replies[2 * i], True, 99999 - i // 5, self.since_start(3600), "(request %d)" % (2 * i))
            self.assertEqual(replies[2 * i + 1], "OK true 5 0")

    def test_concurrent_clients(self):
        # 50 clients x 100 requests on ONE counter of limit 1000: exactly 1000 are allowed,
        # and each credit value 0..999 is handed out exactly once.
        u = uid("conc")
        n_clients, per_client = 50, 100
        results = [None] * n_clients
        errors = []
        barrier = threading.Barrier(n_clients, timeout=harness.IO_TIMEOUT)

        def client(i):
            try:
                kind = "unix" if i % 2 else "tcp"
                with self.d.connect(kind) as c:
                    barrier.wait()
                    line = "HIT path=/shared user=" + u
                    if i % 3 == 0:  # some pipeline everything, the others ask one by one
                        results[i] = c.pipeline([line] * per_client)
                    else:
                        results[i] = [c.request(line) for _ in range(per_client)]
            except Exception as e:  # reported by the main thread
                errors.append("client %d: %r" % (i, e))

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n_clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(harness.IO_TIMEOUT * 3)
        self.assertFalse([t for t in threads if t.is_alive()], "clients still running")
        self.assertEqual(errors, [])
        allowed_credits = []
        denied = 0
        for rs in results:
            self.assertEqual(len(rs), per_client)
            for r in rs:
                p = harness.parse_ok(r)
                self.assertIsNotNone(p, r)
                if p[0]:
                    allowed_credits.append(p[1])
                else:
                    self.assertEqual(p[1], 0, r)
                    denied += 1
        self.assertEqual(len(allowed_credits), 1000)
        self.assertEqual(sorted(allowed_credits), list(range(1000)))
        self.assertEqual(denied, n_clients * per_client - 1000)

    def test_many_open_connections(self):
        # 300 connections open at once, each asks once with all the others still open.
        conns = []
        try:
            for i in range(300):
                conns.append(self.d.connect("unix" if i % 2 else "tcp"))
            for c in conns:
                c.send("HIT path=/open\n")
            for c in conns:
                self.assertEqual(c.readline(), "OK true 5 0")
        finally:
            for c in conns:
                c.close()

    def test_stuck_client_does_not_block_others(self):
        # Client A writes as fast as it can and never reads. Once its unsent replies pile up
        # the daemon stops reading it (--output-limit), A's writes block, and other clients
        # are still served.
        a = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: small window
        a.settimeout(harness.IO_TIMEOUT)
        a.connect(("127.0.0.1", self.d.port))
        self.addCleanup(a.close)
        a.setblocking(False)
        chunk = b"HIT path=/open\n" * 4096
        sent = 0
        cap = 256 << 20  # bytes: give up filling after this much (bounds the test)
        stalled = False
        while sent < cap:
            try:
                sent += a.send(chunk)
                continue
            except BlockingIOError:
                pass
            # Not writable for a while: A's pipe is full; the daemon is holding it off.
            _, w, _ = select.select([], [a], [], 0.5 * harness.TIMEOUT_SCALE)
            if not w:
                stalled = True
                break
        self.assertTrue(stalled, "daemon kept reading %d bytes from a client that never reads" % sent)

        # B is served while A is stuck.
        u = uid("b")
        with self.d.connect("tcp") as b:
            self.assertHit(b.request("HIT path=/probe user=" + u), True, 9, 3600)
            replies = b.pipeline(["HIT path=/probe user=" + u] * 3)
            self.assertWindow(replies, 10, 3600, start_credit=8)
        with self.d.connect("unix") as b:
            self.assertEqual(b.request("HIT path=/open"), "OK true 5 0")

        # A's replies so far are well-formed and in order, then A goes away.
        a.setblocking(True)
        a.settimeout(harness.IO_TIMEOUT)
        data = a.recv(65536)
        self.assertTrue(data.startswith(b"OK true 5 0\n"), data[:40])
        a.close()
        self.assertEqual(self.d.request("HIT path=/open"), "OK true 5 0")
        self.assertTrue(self.d.running())

    def test_slow_reader_gets_everything(self):
        # A client that reads slowly (small chunks) but does read gets every reply in order.
        u = uid("slow")
        n = 10000
        with self.d.connect("tcp") as c:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            payload = ("HIT path=/big user=%s\n" % u).encode() * n
            t = threading.Thread(target=c.sock.sendall, args=(payload,), daemon=True)
            t.start()
            got = b""
            deadline = time.monotonic() + harness.IO_TIMEOUT * 3
            while got.count(b"\n") < n and time.monotonic() < deadline:
                chunk = c.sock.recv(2048)
                if not chunk:
                    break
                got += chunk
            t.join(harness.IO_TIMEOUT)
        lines = got.decode().split("\n")[:-1]
        self.assertEqual(len(lines), n)
        self.assertEqual([harness.parse_ok(l)[1] for l in lines], list(range(99999, 99999 - n, -1)))


if __name__ == "__main__":
    harness.main()
