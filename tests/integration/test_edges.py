#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Edges of the request path over real sockets that the other suites do not reach.

- Lingering after an ERR when more than one discard pass of input (256 KiB) is already queued
  with the peer's FIN behind it: divvyd must read on to that EOF and close, not wait for the
  linger timeout and then close on unread input (a reset). Regression test: the discard loop
  stopped at its bound and, edge-triggered, was never woken again.
- Every request of each verb, line protocol (v1 and v2, "\\n" and "\\r\\n") and RESP, fed one
  byte per read() of the daemon (a Unix socket, each byte's consumption checked with
  TIOCOUTQ, so the daemon really sees every partial frame) and a mixed pipeline cut in two at
  every byte: replies byte-identical to the same requests sent whole, with --sync=always (the
  batch in flight while the rest of the input arrives).
- RESP's limits exactly at and one past each bound over a socket (a 10,368-byte request,
  8,192-byte bulk, 136 arguments, 64 distinct keys), and maximal requests pipelined so that
  the input buffer holds a framed request and a partial one across compactions; a RESP
  connection that turns to the line protocol after its first request.
- Many connections pipelining under --sync=always while SIGHUP reloads flip the config: every
  request answered once and in order, and the last reload takes effect.

Nothing here is decided by timing; every wait is bounded.

Run one test:  tests/integration/test_edges.py Linger.test_discard_reaches_eof
"""

import itertools
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultlib  # noqa: E402
import harness  # noqa: E402
from harness import data_path  # noqa: E402

SO_SNDBUFFORCE = 32  # <asm-generic/socket.h>: SO_SNDBUF beyond wmem_max (needs CAP_NET_ADMIN)
DISCARD_PASS = 64 * 4096  # bytes connection_discard_input() reads per call
_ids = itertools.count(1)


class Linger(harness.DaemonTestCase):
    def test_discard_reaches_eof(self):
        d = self.start_daemon(data_path("itest.ini"), args=["--debug"], listen=("unix",))
        pid = d.pid()
        fds0 = faultlib.fd_count(pid)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(harness.IO_TIMEOUT)
        try:
            s.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, 8 << 20)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)  # capped at wmem_max
        s.connect(d.unix_path)
        with harness.Conn(s) as c:
            # A bad line: ERR, then divvyd shuts down its side and lingers, discarding input.
            c.send("FOO\n")
            self.assertEqual(c.readline(), 'ERR unknown-command "unknown command"')
            self.assertTrue(c.at_eof())
            self.assertEqual(faultlib.fd_count(pid), fds0 + 1)
            # While it is stopped, queue several discard passes of input and our FIN, so that
            # it wakes to one edge with all of it waiting.
            try:
                faultlib.freeze(pid)  # SIGSTOP, every thread stopped
                s.setblocking(False)
                queued, chunk = 0, b"x" * 65536
                while queued < 6 * DISCARD_PASS:
                    try:
                        queued += s.send(chunk)
                    except BlockingIOError:
                        break
                s.shutdown(socket.SHUT_WR)
            finally:
                d.signal(signal.SIGCONT)
            if queued <= DISCARD_PASS + 4096:
                self.skipTest("could queue only %d bytes on a Unix socket (SO_SNDBUF capped by "
                              "net.core.wmem_max)" % queued)
            faultlib.wait_for(lambda: faultlib.fd_count(pid) == fds0, 10,
                              "the daemon to close the connection")
        # Closed because it read our EOF, not by the linger timeout with input unread.
        self.assertNotRegex(d.log_text(), r"peer did not close")


class Split(harness.DaemonTestCase):
    """Requests fed in pieces against the same requests sent whole, --sync=always."""

    LINES = ["HIT path=/fw user={u}", 'hit "path"="/fw" "user"="{u}"', "TAKE 2 path=/tb user={u}",
             "PEEK path=/sw user={u}", "PEEK 0 path=/fw user={u}", "CHARGE 3 path=/sw user={u}",
             "REFUND 1 path=/fw user={u}", "RESET path=/fw user={u}", "EXPLAIN path=/multi/x user={u}",
             "HELLO", "TAKE 1 path=/multi/{u} user={u}", "HIT path=/canary/x user={u}",
             "TAKE 0 path=/fw user={u}", "FOO {u}"]
    RESP = [("HIT", "path", "/fw", "user", "{u}"), ("TAKE", "2", "path", "/tb", "user", "{u}"),
            ("PEEK", "path", "/sw", "user", "{u}"), ("PEEK", "0", "path", "/fw", "user", "{u}"),
            ("CHARGE", "3", "path", "/sw", "user", "{u}"), ("REFUND", "1", "path", "/fw", "user", "{u}"),
            ("RESET", "path", "/fw", "user", "{u}"), ("EXPLAIN", "path", "/multi/x", "user", "{u}"),
            ("HELLO", "2", "SETNAME", "n{u}"), ("CLIENT", "GETNAME"), ("PING", "a {u}"), ("ECHO", "{u}"),
            ("COMMAND", "INFO", "a", "b"), ("SELECT", "0"), ("CL.THROTTLE", "{u}", "15", "30", "60"),
            ("RL.REDUCE", "{u}", "3", "60"), ("NOPE", "{u}"), ("TAKE", "0", "path", "/fw"), ("QUIT",)]

    @classmethod
    def setUpClass(cls):
        tmp = harness.make_tmpdir()
        cls.addClassCleanup(shutil.rmtree, tmp, True)
        cls.admin_path = os.path.join(tmp, "admin.sock")
        cls.d = cls.start_shared_daemon(data_path("verbs.ini"), tmpdir=tmp, listen=("unix",),
                                        args=["--sync=always", "--allow-client-limits",
                                              "--listen", "admin:unix:" + cls.admin_path])

    def setUp(self):
        super().setUp()
        self.d.drain_notes(0)

    def actor(self, tag):
        """A fresh actor of fixed length: its counters are new, its replies comparable."""
        return "%s%05d" % (tag, next(_ids))

    def exchange(self, chunks, admin=False):
        """Sends chunks on a new Unix connection, each read by the daemon before the next is
        sent (TIOCOUTQ), half-closes, returns everything the daemon said until it closed."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(harness.IO_TIMEOUT)
        s.connect(self.admin_path if admin else self.d.unix_path)
        with s:
            for ch in chunks:
                s.sendall(ch)
                deadline = time.monotonic() + harness.IO_TIMEOUT
                while harness.unix_sent_unread(s) > 0:
                    if time.monotonic() > deadline:
                        raise harness.HarnessError("the daemon did not read %r" % ch)
                    time.sleep(0.0002)
            s.shutdown(socket.SHUT_WR)
            return harness.read_until_close(s, reset_ends=True)

    def compare(self, make, pieces, admin=False, whole=None):
        """make(actor) -> bytes; the replies to it sent whole (or whole, from an earlier call)
        and in pieces(bytes) -> chunks, each on fresh counters. Returns the whole replies."""
        # RESP's HELLO shows the connection's id: the only bytes allowed to differ.
        strip = re.compile(rb"\$2\r\nid\r\n:\d+\r\n")
        if whole is None:
            uw = self.actor("w")
            whole = strip.sub(b"", self.exchange([make(uw)], admin).replace(uw.encode(), b"U"))
        us = self.actor("s")
        split = strip.sub(b"", self.exchange(pieces(make(us)), admin).replace(us.encode(), b"U"))
        self.assertEqual(split, whole, make(us)[:80])
        return whole

    @staticmethod
    def bytewise(data):
        return [data[i:i + 1] for i in range(len(data))]

    def test_every_request_byte_by_byte(self):
        for admin in (False, True):
            for t in self.LINES:
                for end in ("\n", "\r\n"):
                    with self.subTest(line=t, end=end, admin=admin):
                        self.compare(lambda u: (t.format(u=u) + end).encode(), self.bytewise, admin)
            for args in self.RESP:
                with self.subTest(resp=args, admin=admin):
                    got = self.compare(lambda u: harness.resp_command(*[a.format(u=u) for a in args]), self.bytewise, admin)
                    self.assertTrue(got, args)

    def test_pipeline_cut_at_every_byte(self):
        def lines(u):
            return ("HIT path=/fw user={u}\r\nTAKE 2 path=/tb user={u}\nPEEK path=/fw user={u}\r\nHELLO\n"
                    "EXPLAIN path=/sw user={u}\nCHARGE 1 path=/sw user={u}\nREFUND 1 path=/fw user={u}\n"
                    "HIT path=/fw user={u}\n").format(u=u).encode()

        def resps(u):
            return (harness.resp_command("HIT", "path", "/fw", "user", u) + b"\r\n" + harness.resp_command("TAKE", "2", "path", "/tb", "user", u) +
                    harness.resp_command("PING") + harness.resp_command("PEEK", "path", "/fw", "user", u) + b"*0\r\n" + harness.resp_command("ECHO", u) +
                    harness.resp_command("TAKE", "0", "path", "/x") + harness.resp_command("EXPLAIN", "path", "/sw", "user", u) +
                    harness.resp_command("REFUND", "1", "path", "/fw", "user", u) + harness.resp_command("NOPE") +
                    harness.resp_command("CHARGE", "1", "path", "/sw", "user", u))

        for make, tag in ((lines, "line"), (resps, "resp")):
            n, got = len(make(self.actor("x"))), None
            for pos in range(1, n):
                with self.subTest(proto=tag, cut=pos):
                    got = self.compare(make, lambda data: [data[:pos], data[pos:]], whole=got)
            # the whole pipeline is answered (the line one up to its ERR forbidden)
            self.assertTrue(got.endswith(b'ERR forbidden "REFUND needs an admin listener"\n')
                            if tag == "line" else got.endswith(b"$2\r\nsw\r\n"), got[-80:])


class RespLimits(harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = cls.start_shared_daemon(data_path("verbs.ini"), args=["--sync=always"])

    def raw(self, data, kind="tcp"):
        with self.d.connect(kind) as c:
            t = threading.Thread(target=faultlib.send_quietly, args=(c.sock, data, True), daemon=True)
            t.start()
            out = harness.read_until_close(c.sock, reset_ends=True)
            t.join(harness.IO_TIMEOUT)
            return out

    @staticmethod
    def sized(total):
        """A HIT of 62 short pairs, one 8,000-byte value and one padded to make the request
        exactly total bytes long (no bulk over 8,192)."""
        pairs = [x for i in range(62) for x in ("k%d" % i, "v")]
        v = "x" * (total - len(harness.resp_command("HIT", *pairs, "y", "x" * 8000, "z", "")))
        r = harness.resp_command("HIT", *pairs, "y", "x" * 8000, "z", v)
        while len(r) > total:
            v = v[:-1]
            r = harness.resp_command("HIT", *pairs, "y", "x" * 8000, "z", v)
        assert len(r) == total, len(r)
        return r

    def test_at_and_past_each_bound(self):
        deny = b"*3\r\n:0\r\n:0\r\n:-1\r\n"  # verbs.ini's default rule
        err = b"-ERR Protocol error: "
        pairs = lambda n, pre="k": [x for i in range(n) for x in ("%s%d" % (pre, i), "v")]  # noqa: E731
        cases = [
            (self.sized(10368), deny),
            (self.sized(10369), err + b"request longer than the line limit\r\n"),
            (harness.resp_command("HIT", "k", "v" * 8192), deny),
            (harness.resp_command("HIT", "k", "v" * 8193), err + b"bulk string longer than the line limit\r\n"),
            (harness.resp_command("HIT", *pairs(64)), deny),
            (harness.resp_command("HIT", *pairs(65)), b"-ERR unknown too many key=value pairs\r\n"),
            (harness.resp_command("TAKE", "1", *(["k", "v"] * 67)), b"*6\r\n:0\r\n:0\r\n:0\r\n:0\r\n:-1\r\n$2\r\n#9\r\n"),
            (harness.resp_command("TAKE", "1", "@1", *(["k", "v"] * 67)), err + b"too many arguments\r\n"),
            (b"*000000000000000001\r\n$4\r\nPING\r\n", b"+PONG\r\n"),
            (b"*0000000000000000001\r\n$4\r\nPING\r\n", err + b"invalid length\r\n"),
            (b"*-2\r\n", err + b"invalid length\r\n"),
            (b"*1\r\n$-1\r\n", err + b"invalid length\r\n"),
            (b"*0\r\n*-1\r\n\r\n\n" + harness.resp_command("PING"), b"+PONG\r\n"),
        ]
        for i, (data, want) in enumerate(cases):
            with self.subTest(case=i, head=data[:30]):
                self.assertEqual(self.raw(data, "unix" if i % 2 else "tcp"), want)

    def test_maximal_requests_pipelined(self):
        # Three requests of 10,368 bytes and ECHOs of 8,190: the input buffer holds one framed
        # request and part of the next, framed again after each compaction.
        big = self.sized(10368)
        self.assertEqual(self.raw(big * 3), b"*3\r\n:0\r\n:0\r\n:-1\r\n" * 3)
        echoes = [("%05d" % i) * 1638 for i in range(60)]
        want = b"".join(b"$8190\r\n%s\r\n" % e.encode() for e in echoes)
        for kind in ("tcp", "unix"):
            self.assertEqual(self.raw(b"".join(harness.resp_command("ECHO", e) for e in echoes), kind), want)

    def test_resp_then_line(self):
        # The first byte decided RESP: a divvy line after a RESP request is broken framing.
        self.assertEqual(self.raw(harness.resp_command("PING") + b"HIT path=/fw user=x\n" + harness.resp_command("PING")),
                         b"+PONG\r\n-ERR Protocol error: expected '*' (divvyd takes RESP arrays of bulk "
                         b"strings)\r\n")


class ReloadInFlight(harness.DaemonTestCase):
    def test_sighup_during_pipelines_sync_always(self):
        tmp = harness.make_tmpdir()
        self.addCleanup(shutil.rmtree, tmp, True)
        with open(data_path("itest.ini")) as f:
            base = f.read()
        with_hup = base.replace("[default]", "[path=/hup]\ncreditLimit = 7\nresetSeconds = 0\n\n[default]")
        config = os.path.join(tmp, "rules.ini")

        def write(text):
            with open(config + ".new", "w") as f:
                f.write(text)
            os.rename(config + ".new", config)

        write(base)
        d = self.start_daemon(config, args=["--sync=always"])
        stop_draining = d.drain_notes_in_background(self)
        n_conns, n_reqs = 16, 1500
        results, errors = {}, []

        def client(i):
            try:
                with d.connect("unix" if i % 2 else "tcp") as c:
                    if i % 4 < 2:
                        payload = ("HIT path=/big user=r%d\n" % i).encode() * n_reqs
                    else:
                        payload = harness.resp_command("HIT", "path", "/big", "user", "r%d" % i) * n_reqs
                    t = threading.Thread(target=faultlib.send_quietly, args=(c.sock, payload, True), daemon=True)
                    t.start()
                    results[i] = harness.read_until_close(c.sock, reset_ends=True)
                    t.join(harness.IO_TIMEOUT)
            except Exception as e:
                errors.append("client %d: %r" % (i, e))

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n_conns)]
        for t in threads:
            t.start()
        for k in range(10):
            write(with_hup if k % 2 == 0 else base)
            d.signal(signal.SIGHUP)
            time.sleep(0.02)  # spreads the reloads over the load; no check depends on it
        for t in threads:
            t.join(harness.IO_TIMEOUT * 3)
        stop_draining()
        self.assertEqual(errors, [])
        for i in range(n_conns):
            out = results.get(i, b"")
            if i % 4 < 2:
                got = [harness.parse_ok(l)[:2] if harness.parse_ok(l) else l
                       for l in out.decode().splitlines()]
            else:
                got = [(a == b"1", int(b)) for a, b in re.findall(rb"\*3\r\n:(\d)\r\n:(\d+)\r\n:\d+\r\n", out)]
                self.assertEqual(len(out), sum(len(b"*3\r\n:1\r\n:%d\r\n:3600\r\n" % (99999 - j))
                                               for j in range(n_reqs)), "client %d" % i)
            self.assertEqual(got, [(True, 99999 - j) for j in range(n_reqs)], "client %d" % i)
        write(with_hup)
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        d.wait_note("READY=1", after=before, what="READY=1 after the last reload")
        self.assertEqual(d.request("HIT path=/hup"), "OK true 7 0")


if __name__ == "__main__":
    harness.main()
