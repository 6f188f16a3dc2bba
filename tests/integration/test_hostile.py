#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Hostile and broken clients against the real divvyd: none of them may take the daemon
down, make it lose or misorder another client's replies, or grow its memory without bound.

10,000 concurrent connections (the fd limit raised here, inherited by the daemon) up to
--max-connections, then refusal; slow writers (1 byte per 10 ms), readers that never read,
disconnects mid-request and mid-reply, half-closes, oversize lines, a 1 MiB line of k=v
pairs, binary garbage and NUL bytes. Memory is the daemon's VmRSS from /proc; latency of a
well-behaved client is printed as a benchmark ("FIGURE ..." lines), never asserted.

Run one test:  tests/integration/test_hostile.py Hostile.test_garbage
"""

import itertools
import os
import random
import select
import shutil
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultlib  # noqa: E402
import harness  # noqa: E402
from faultlib import report  # noqa: E402
from harness import data_path  # noqa: E402

_ids = itertools.count(1)

TOO_MANY = 'ERR unknown "too many connections"'
LINE_TOO_LONG = 'ERR unknown "line too long"'
OUTPUT_LIMIT = 64 * 1024  # bytes: --output-limit of the shared daemon, so stuck readers cost little
# KiB the daemon may keep after a test of hostile clients that have all gone: allocator slack,
# not per-client state (each connection's buffers are bounded and freed at close).
RSS_SLACK_KIB = 32 * 1024


def uid(prefix):
    return "%s-%d-%d" % (prefix, os.getpid(), next(_ids))


class Hostile(harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = cls.start_shared_daemon(data_path("itest.ini"),
                                        args=["--output-limit", str(OUTPUT_LIMIT)])

    def setUp(self):
        super().setUp()
        # Warm the allocator with a little traffic so that the baseline is not a cold start.
        with self.d.connect("tcp") as c:
            c.pipeline(["HIT path=/open"] * 100)
        self.rss0 = faultlib.vmrss_kib(self.d.pid())
        self.fds0 = faultlib.fd_count(self.d.pid())

    def assertRecovered(self, what):
        """The daemon is up, serves a fresh client, has closed every hostile connection and has
        not kept their memory."""
        pid = self.d.pid()
        self.assertTrue(self.d.running(), "daemon died after %s" % what)
        faultlib.wait_for(lambda: faultlib.fd_count(pid) <= self.fds0, 10,
                          "the daemon to close the connections of %s (fds %d, before %d)" %
                          (what, faultlib.fd_count(pid), self.fds0))
        self.assertEqual(self.d.request("HIT path=/open"), "OK true 5 0")
        self.assertEqual(self.d.request("HIT path=/open", "unix"), "OK true 5 0")
        rss = faultlib.vmrss_kib(pid)
        report("rss-" + what, "VmRSS %d KiB before, %d KiB after" % (self.rss0, rss))
        self.assertLess(rss - self.rss0, RSS_SLACK_KIB,
                        "VmRSS grew from %d to %d KiB after %s" % (self.rss0, rss, what))

    # --- slow clients -----------------------------------------------------------------------

    def test_slow_writers(self):
        # 100 clients each dribble two requests at one byte per 10 ms while a normal client
        # keeps asking; every slow request is answered right, in order.
        n = 100
        users = [uid("slow") for _ in range(n)]
        payloads = [("HIT path=/probe user=%s\nHIT path=/probe user=%s\n" % (u, u)).encode()
                    for u in users]
        conns = [self.d.connect("unix" if i % 2 else "tcp") for i in range(n)]
        base = faultlib.LatencyProbe(self.d).start()
        time.sleep(0.3)  # benchmark baseline only: no assertion depends on it
        base.stop()
        probe = faultlib.LatencyProbe(self.d).start()
        try:
            for pos in range(max(len(p) for p in payloads)):
                for c, p in zip(conns, payloads):
                    if pos < len(p):
                        c.send(p[pos:pos + 1])
                time.sleep(0.01)
            for c in conns:
                self.assertEqual(c.readlines(2), ["OK true 9 3600", "OK true 8 3600"])
        finally:
            probe.stop()
            for c in conns:
                c.close()
        self.assertEqual(probe.errors, [])
        report("slow-writers", "%d clients at 1 byte/10 ms; other client alone: %s; during: %s" %
               (n, base.summary(), probe.summary()))
        self.assertRecovered("slow-writers")

    def test_trickled_request_times_out(self):
        # One byte now and then (here every 0.2 s) never completing a request, on the line
        # protocol and on RESP: each connection is closed at --request-timeout (1 s here),
        # though it is never idle; a quiet connection with no request begun stays open.
        d = self.start_daemon(data_path("itest.ini"), args=["--request-timeout=1"])
        quiet = d.connect("unix")
        self.addCleanup(quiet.close)
        payloads = {"line": b"HIT path=/open user=" + b"x" * 200,
                    "resp": b"*2\r\n$4\r\nECHO\r\n$200\r\n" + b"y" * 200}
        cap = 100  # bytes: 20 s at 1 byte per 0.2 s, never reached if the timeout works
        for name, payload in payloads.items():
            c = d.connect("tcp")
            self.addCleanup(c.close)
            closed_after = None
            for i in range(cap):
                try:
                    c.sock.sendall(payload[i:i + 1])
                    rd, _, _ = select.select([c.sock], [], [], 0.2)
                    if rd and c.sock.recv(4096) == b"":
                        closed_after = i + 1
                        break
                except (BrokenPipeError, ConnectionResetError):
                    closed_after = i + 1
                    break
            report("trickle-" + name, "closed after %s bytes at 1 byte per 0.2 s" % closed_after)
            self.assertIsNotNone(closed_after, "%s: %d bytes trickled, still open" % (name, cap))
        self.assertEqual(quiet.request("HIT path=/open"), "OK true 5 0")

    def test_slow_http_clients_do_not_starve_healthz(self):
        # 80 connections trickling header bytes to the metrics endpoint (more than it holds):
        # every /healthz and /metrics probe is still answered, and a trickler never completing
        # its request is closed (HTTP_REQUEST_USEC, 5 s) though it is never silent. Counted,
        # not timed: 5 of 5 probes of each, and a bounded trickle.
        port = harness.free_tcp_port()
        d = self.start_daemon(data_path("itest.ini"), args=["--http-port=%d" % port])
        part = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nX-Slow: "
        slow = []
        for _ in range(80):
            s = socket.create_connection(("127.0.0.1", port), timeout=harness.IO_TIMEOUT)
            self.addCleanup(s.close)
            s.sendall(part)
            slow.append(s)
        answered = 0
        for path, want in (("/healthz", b"ok\n"), ("/metrics", b"divvyd_build_info")) * 5:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=harness.IO_TIMEOUT) as p:
                    p.sendall(b"GET %s HTTP/1.0\r\n\r\n" % path.encode())
                    got = harness.read_until_close(p, reset_ends=True)
            except OSError:  # refused, reset or timed out: not answered
                got = b""
            if got.startswith(b"HTTP/1.1 200 OK") and want in got:
                answered += 1
        report("http-slow-clients", "%d of 10 probes answered beside 80 slow clients" % answered)
        self.assertEqual(answered, 10)
        # One more keeps trickling, a byte every 0.25 s: closed by the deadline (5 s, checked
        # every second), long before 80 bytes (20 s).
        t = socket.create_connection(("127.0.0.1", port), timeout=harness.IO_TIMEOUT)
        self.addCleanup(t.close)
        t.sendall(part)
        closed_after = None
        for i in range(80):
            try:
                t.sendall(b"x")
                rd, _, _ = select.select([t], [], [], 0.25)
                if rd and t.recv(4096) == b"":
                    closed_after = i + 1
                    break
            except (BrokenPipeError, ConnectionResetError):
                closed_after = i + 1
                break
        report("http-trickle", "closed after %s bytes at 1 byte per 0.25 s" % closed_after)
        self.assertIsNotNone(closed_after, "a trickling HTTP client was never closed")

    def test_readers_that_never_read(self):
        # 40 clients pipeline requests as fast as they can and never read. The daemon stops
        # reading each once its unsent replies pass --output-limit, so its memory stays
        # bounded, and other clients are served meanwhile.
        n = 40
        conns = []
        probe = faultlib.LatencyProbe(self.d).start()
        sent_total = 0
        try:
            for i in range(n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                s.settimeout(harness.IO_TIMEOUT)
                s.connect(("127.0.0.1", self.d.port))
                s.setblocking(False)
                conns.append(s)
            chunk = b"HIT path=/open\n" * 4096
            stuck = set()
            deadline = time.monotonic() + 20 * harness.TIMEOUT_SCALE
            cap = 64 << 20  # bytes per client: give up long before this if the daemon keeps reading
            sent = [0] * n
            while len(stuck) < n and time.monotonic() < deadline:
                progress = False
                for i, s in enumerate(conns):
                    if i in stuck:
                        continue
                    try:
                        k = s.send(chunk)
                        sent[i] += k
                        progress = True
                        if sent[i] > cap:
                            self.fail("daemon kept reading %d bytes from a client that never reads" % sent[i])
                    except BlockingIOError:
                        stuck.add(i)
                if not progress:
                    time.sleep(0.05)
            self.assertEqual(len(stuck), n, "some clients were never held off")
            # All held off: the daemon's memory for them is bounded by the limits.
            time.sleep(0.2)
            rss = faultlib.vmrss_kib(self.d.pid())
            sent_total = sum(sent)
            # Per client at most: unsent replies (limit + one batch of replies) + the input buffer.
            bound = n * (OUTPUT_LIMIT + 64 * 128 + 32 * 1024) // 1024 + RSS_SLACK_KIB
            report("never-read", "%d clients stuck after sending %d bytes in all; VmRSS %d KiB "
                   "(baseline %d KiB, bound %d KiB)" % (n, sent_total, rss, self.rss0, self.rss0 + bound))
            self.assertLess(rss - self.rss0, bound)
            u = uid("b")
            with self.d.connect("unix") as b:
                self.assertEqual(b.pipeline(["HIT path=/probe user=" + u] * 3),
                                 ["OK true 9 3600", "OK true 8 3600", "OK true 7 3600"])
        finally:
            probe.stop()
            for s in conns:
                faultlib.reset_close(s)
        self.assertEqual(probe.errors, [])
        report("never-read-latency", "other client while %d never read: %s" % (n, probe.summary()))
        self.assertRecovered("never-read")

    def stuck_unix_clients(self, d, n, line):
        """n Unix clients that pipeline line as fast as they can and never read, until the
        daemon has stopped reading every one (its queue stayed full for 20 tries 50 ms apart).
        Returns (connections, bytes sent by each)."""
        conns = []
        for _ in range(n):
            c = d.connect("unix")
            self.addCleanup(c.close)
            c.sock.setblocking(False)
            conns.append(c)
        chunk = line * 4096
        sent = [0] * n
        refused = [0] * n
        deadline = time.monotonic() + 60 * harness.TIMEOUT_SCALE
        while min(refused) < 20 and time.monotonic() < deadline:
            for i, c in enumerate(conns):
                try:
                    sent[i] += c.sock.send(chunk[sent[i] % len(line):])  # a partial line first
                    refused[i] = 0
                    self.assertLess(sent[i], 64 << 20, "the daemon kept reading a client that never reads")
                except BlockingIOError:
                    refused[i] += 1
            time.sleep(0.05)
        self.assertGreaterEqual(min(refused), 20, "some clients were never held off")
        return conns, sent

    def test_never_reading_memory_bound_given_back(self):
        # Clients that pipeline and never read, at the default --output-limit (1 MiB): each
        # costs the daemon at most the documented bound (docs/security.md "Security": output_limit + 49
        # KiB), also after others like them have come and gone, and once they read every
        # reply that memory is given back while they stay connected (the output buffer returns
        # to its small size). Memory is VmRSS; the count of replies is exact.
        n, line, reply = 16, b"HIT path=/open\n", b"OK true 5 0\n"
        bound_kib = 1024 + 49
        d = self.start_daemon(data_path("itest.ini"))
        with d.connect("unix") as c:
            c.pipeline(["HIT path=/open"] * 1000)
        # Others came, stopped reading and left (as a crashed client pool's connections do).
        fds0 = faultlib.fd_count(d.pid())
        gone, _ = self.stuck_unix_clients(d, 4, line)
        for c in gone:
            c.close()
        faultlib.wait_for(lambda: faultlib.fd_count(d.pid()) <= fds0, 10, "the daemon to close them")
        rss0 = faultlib.vmrss_kib(d.pid())
        conns, sent = self.stuck_unix_clients(d, n, line)
        time.sleep(0.2)  # the daemon's last batches (memory only; nothing is asserted on time)
        rss1 = faultlib.vmrss_kib(d.pid())
        report("never-read-default-limit", "%d clients: VmRSS %d KiB before, %d KiB stuck: %.0f KiB "
               "each (bound %d)" % (n, rss0, rss1, (rss1 - rss0) / n, bound_kib))
        self.assertLessEqual(rss1 - rss0, n * bound_kib)
        # Every client catches up: all its replies arrive (the daemon reads the rest meanwhile,
        # and the end of a line cut short, sent as the daemon makes room).
        for i, c in enumerate(conns):
            rest = line[sent[i] % len(line):] if sent[i] % len(line) else b""
            want = (sent[i] + len(rest)) // len(line) * len(reply)
            got = 0
            while got < want:
                rd, wr, _ = select.select([c.sock], [c.sock] if rest else [], [], harness.IO_TIMEOUT)
                self.assertTrue(rd or wr, "client %d: %d of %d reply bytes, then nothing" % (i, got, want))
                if wr:
                    rest = rest[c.sock.send(rest):]
                if rd:
                    chunk_in = c.sock.recv(1 << 20)
                    self.assertNotEqual(chunk_in, b"", "closed after %d of %d reply bytes" % (got, want))
                    got += len(chunk_in)
            self.assertEqual(got, want)
            c.sock.settimeout(harness.IO_TIMEOUT)
        rss2 = faultlib.vmrss_kib(d.pid())
        report("never-read-given-back", "after catching up, still connected: VmRSS %d KiB (%.0f KiB "
               "each over the start)" % (rss2, (rss2 - rss0) / n))
        # Given back: what stays per connection is its input buffer and a small output buffer.
        self.assertLess(rss2 - rss0, n * 64 + 1024, "VmRSS %d KiB before, %d stuck, %d after "
                        "catching up" % (rss0, rss1, rss2))
        for c in conns:
            self.assertEqual(c.request("HIT path=/open"), "OK true 5 0")

    # --- disconnects --------------------------------------------------------------------------

    def test_disconnect_mid_request(self):
        # Clients that vanish halfway through a request line, politely (FIN) or not (RST).
        for i in range(200):
            c = self.d.connect("tcp" if i % 3 else "unix")
            c.send("HIT path=/probe user=" + uid("mid")[: (i % 20) + 1])
            if i % 2:
                faultlib.reset_close(c.sock)
            else:
                c.close()
        self.assertRecovered("disconnect-mid-request")

    def test_disconnect_mid_reply(self):
        # Clients that pipeline 20,000 requests, read a few replies and reset the connection
        # while the daemon is still writing.
        for i in range(30):
            c = self.d.connect("tcp" if i % 2 else "unix")
            t = threading.Thread(target=lambda s=c.sock: faultlib.send_quietly(s, b"HIT path=/open\n" * 20000),
                                 daemon=True)
            t.start()
            self.assertEqual(c.readline(), "OK true 5 0")
            faultlib.reset_close(c.sock)
            t.join(harness.IO_TIMEOUT)
        self.assertRecovered("disconnect-mid-reply")

    def test_half_close_many(self):
        # 20 clients send 3,000 requests each, shut down their writing side at once and still
        # get every reply, in order (divvy dropped them).
        results, errors = {}, []

        def client(i):
            try:
                u = uid("hc")
                with self.d.connect("unix" if i % 2 else "tcp") as c:
                    c.send(("HIT path=/big user=%s\n" % u) * 3000)
                    c.shutdown_write()
                    results[i] = c.read_until_eof()
            except Exception as e:
                errors.append("client %d: %r" % (i, e))

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(harness.IO_TIMEOUT * 3)
        self.assertEqual(errors, [])
        self.assertEqual(sorted(results), list(range(20)))
        for lines in results.values():
            self.assertEqual(len(lines), 3000)
            self.assertEqual([harness.parse_ok(l)[1] for l in lines], list(range(99999, 96999, -1)))
        self.assertRecovered("half-close")

    # --- bad input ------------------------------------------------------------------------------

    def _expect_one_error(self, kind, payload, expect=None):
        """Sends payload (from a thread: the daemon may stop reading early), half-closes, and
        checks that exactly one reply came, an ERR (equal to expect if given), then EOF."""
        with self.d.connect(kind) as c:
            t = threading.Thread(target=faultlib.send_quietly, args=(c.sock, payload, True), daemon=True)
            t.start()
            lines = c.read_until_eof()
            t.join(harness.IO_TIMEOUT)
        self.assertEqual(len(lines), 1, lines[:3])
        self.assertTrue(lines[0].startswith("ERR "), lines[0])
        if expect:
            self.assertEqual(lines[0], expect)
        return lines[0]

    def test_oversize_lines(self):
        for i, size in enumerate((8193, 8194, 65536, 4 << 20)):
            self._expect_one_error("tcp" if i % 2 else "unix", b"HIT x=" + b"a" * size, LINE_TOO_LONG)
            self._expect_one_error("tcp", b"HIT x=" + b"a" * size + b"\n", LINE_TOO_LONG)
        self.assertRecovered("oversize-lines")

    def test_one_mib_line_of_pairs(self):
        pairs, size = [], 4
        for i in itertools.count():
            p = "k%d=v%d" % (i, i)
            if size + len(p) + 1 > 1 << 20:
                break
            pairs.append(p)
            size += len(p) + 1
        line = ("HIT " + " ".join(pairs) + "\n").encode()
        self.assertGreaterEqual(len(line), (1 << 20) - 16)
        for kind in ("tcp", "unix"):
            self._expect_one_error(kind, line, LINE_TOO_LONG)
        # Within the line limit but over the pair limit: refused by the parser.
        self._expect_one_error("tcp", ("HIT " + " ".join(pairs[:200]) + "\n").encode(),
                               'ERR unknown "too many key=value pairs"')
        report("one-mib-line", "%d bytes, %d pairs: refused with %s" % (len(line), len(pairs), LINE_TOO_LONG))
        self.assertRecovered("one-mib-line")

    def test_nul_bytes(self):
        cases = [
            (b"HIT a=\x00\n", 'ERR unknown "NUL byte in request"'),
            (b"HIT a=1 b=\"x\x00y\"\n", 'ERR unknown "NUL byte in request"'),
            (b"\x00\x00\x00\n", 'ERR unknown-command "unknown command"'),
            (b"HIT path=/open\nHIT a=\x00", 'ERR unknown "NUL byte in request"'),
        ]
        for payload, expect in cases:
            with self.d.connect("tcp") as c:
                c.send(payload)
                c.shutdown_write()
                lines = c.read_until_eof()
            want = (["OK true 5 0"] if payload.startswith(b"HIT path=/open\n") else []) + [expect]
            self.assertEqual(lines, want, payload)
        self.assertRecovered("nul-bytes")

    def test_garbage(self):
        # 64 clients, 10 at a time, each pour 256 KiB of random bytes: each gets one ERR and
        # is closed; the bytes after the bad line are read and thrown away.
        rng = random.Random(20260101)
        fed = 0
        for batch in range(0, 64, 10):
            threads, got, errors = [], {}, []
            for i in range(batch, min(batch + 10, 64)):
                payload = bytes(rng.getrandbits(8) for _ in range(256 * 1024)) if i < 4 else \
                    os.urandom(256 * 1024)
                # (a first '*' would make it a RESP connection, issue #17: test_resp.py's garbage)
                if payload.startswith(b"HIT") or payload[:1] in (b" ", b"\t", b"*"):
                    payload = b"\x01" + payload[1:]
                fed += len(payload)

                def client(i=i, payload=payload):
                    try:
                        got[i] = self._expect_one_error("unix" if i % 2 else "tcp", payload)
                    except Exception as e:
                        errors.append("client %d: %r" % (i, e))

                threads.append(threading.Thread(target=client, daemon=True))
            for t in threads:
                t.start()
            for t in threads:
                t.join(harness.IO_TIMEOUT * 2)
            self.assertEqual(errors, [])
        report("garbage", "%d bytes of random bytes fed over 64 connections, each answered by one ERR" % fed)
        self.assertRecovered("garbage")


class ManyConnections(harness.DaemonTestCase):
    N = 10000

    def test_ten_thousand_connections(self):
        n = self.N
        limit = faultlib.raise_nofile(n + 1000)
        if limit < n + 200:
            self.skipTest("RLIMIT_NOFILE is %d and cannot be raised to %d (not root?): cannot hold "
                          "%d connections" % (limit, n + 1000, n))
        d = self.start_daemon(data_path("itest.ini"), args=["--max-connections", str(n)])
        pid = d.pid()
        fds0, rss0 = faultlib.fd_count(pid), faultlib.vmrss_kib(pid)
        conns = []
        t0 = time.monotonic()
        try:
            for i in range(n):
                conns.append(d.connect("unix" if i % 2 else "tcp"))
                if i % 1000 == 999:  # keep the accept queues short
                    self.assertEqual(conns[-1].request("HIT path=/open"), "OK true 5 0")
            # Every connection asks once: all of them are accepted and served.
            for c in conns:
                c.send("HIT path=/open\n")
            for i, c in enumerate(conns):
                self.assertEqual(c.readline(), "OK true 5 0", "connection %d" % i)
            held = time.monotonic() - t0
            self.assertEqual(faultlib.fd_count(pid) - fds0, n)
            rss = faultlib.vmrss_kib(pid)

            # One more on each listener: refused cleanly, with a reason, then closed.
            for kind in ("tcp", "unix"):
                probe = "HIT path=/probe user=refused-%s-%d" % (kind, os.getpid())
                with d.connect(kind) as extra:
                    # A request sent at once on a refused connection is not executed.
                    try:
                        extra.send(probe + "\n")
                    except OSError:
                        pass  # closed by the daemon already: not executed either
                    self.assertEqual(extra.readline(), TOO_MANY)
                    self.assertTrue(extra.at_eof())
                # Its counter is untouched: the first hit on it is a fresh window's.
                self.assertHit(conns[0].request(probe), True, 9, 3600,
                               "(the request on the refused %s connection was executed)" % kind)

            # The 10,000 are unaffected: each is served again, pipelined this time.
            for c in conns:
                c.send("HIT path=/open\nHIT path=/closed\n")
            for i, c in enumerate(conns):
                self.assertEqual(c.readlines(2), ["OK true 5 0", "OK false 0 -1"], "connection %d" % i)
            report("connections", "%d held at once (fd limit %d), connected and served in %.1f s; "
                   "VmRSS %d KiB -> %d KiB (%.1f KiB per connection); over the limit: %s" %
                   (n, limit, held, rss0, rss, (rss - rss0) / n, TOO_MANY))
            # Memory grows with connections by at most their fixed buffers (input buffer, first
            # output buffer, bookkeeping): nothing per request.
            self.assertLess((rss - rss0) / n, 40)
        finally:
            for c in conns:
                c.close()
        faultlib.wait_for(lambda: faultlib.fd_count(pid) <= fds0, 20, "the daemon to close 10,000 connections")
        # Below the limit again: new clients are accepted.
        self.assertEqual(d.request("HIT path=/open"), "OK true 5 0")


class Security(harness.DaemonTestCase):
    def test_refuses_root(self):
        if os.geteuid() != 0:
            self.skipTest("SKIPPED LOUDLY: not root, cannot check that divvyd refuses root")
        tmp = harness.make_tmpdir()
        self.addCleanup(shutil.rmtree, tmp, True)
        sock, db = os.path.join(tmp, "s.sock"), os.path.join(tmp, "db")
        r = subprocess.run([harness.divvyd_path(), "--db", db, "--listen", "unix:" + sock,
                            data_path("itest.ini")], capture_output=True, text=True,
                           timeout=harness.STOP_TIMEOUT, stdin=subprocess.DEVNULL)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("Refusing to run as root", r.stderr)
        self.assertIn("--allow-root", r.stderr)
        # Refused before touching anything.
        self.assertFalse(os.path.exists(sock) or os.path.exists(db))
        # With --allow-root it runs, and says so.
        d = self.start_daemon(data_path("itest.ini"))
        self.assertEqual(d.request("HIT path=/open"), "OK true 5 0")
        self.assertIn("Running as root (--allow-root)", d.log_text())


if __name__ == "__main__":
    harness.main()
