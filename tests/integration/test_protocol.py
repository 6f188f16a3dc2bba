#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""divvyd over real sockets: divvy's README transcripts, rule semantics, framing and errors.

Framing at its edges:

- Lingering after an ERR when more than one discard pass of input (256 KiB) is already queued
  with the peer's FIN behind it: divvyd must read on to that EOF and close, not wait for the
  linger timeout and then close on unread input (a reset). Regression test: the discard loop
  stopped at its bound and, edge-triggered, was never woken again.
- Every request of each verb, line protocol (v1 and v2, "\\n" and "\\r\\n") and RESP, fed one
  byte per read() of the daemon (a Unix socket, each byte's consumption checked with
  TIOCOUTQ, so the daemon really sees every partial frame) and a mixed pipeline cut in two at
  every byte: replies byte-identical to the same requests sent whole, with --sync=always (the
  batch in flight while the rest of the input arrives).

Run one test:  tests/integration/test_protocol.py Framing.test_byte_by_byte
"""

import itertools
import os
import re
import shutil
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultlib  # noqa: E402
import harness  # noqa: E402
from harness import data_path, example_path  # noqa: E402

_ids = itertools.count(1)


def uid(prefix):
    """A fresh actor value, so no two tests share a counter."""
    return "%s-%d-%d" % (prefix, os.getpid(), next(_ids))


class _OnExample:  # mixin: one daemon per class, serving examples/<example>
    example = None

    @classmethod
    def setUpClass(cls):
        path = example_path(cls.example)
        if not os.path.exists(path):
            raise harness.unittest.SkipTest("%s does not exist" % path)
        cls.d = cls.start_shared_daemon(path)


class _ExampleBase(_OnExample):  # mixin: not a test case by itself
    """divvy's "Getting Started" transcripts against one of examples/example-config.*"""

    def test_status_transcript(self):
        # "OK true 999 60", then the credit goes down by one per hit. Only this test touches
        # the global GET /status counter of this daemon.
        with self.d.connect("tcp") as c:
            replies = [c.request("HIT method=GET path=/status") for _ in range(5)]
            # Quoting makes no difference (the Protocol section's form).
            replies.append(c.request('HIT method="GET" path="/status"'))
            # Extra keys are ignored by a rule that does not name them.
            replies.append(c.request("HIT method=GET path=/status client=itest"))
        self.assertWindow(replies, 1000, 60)
        # The same counter over the Unix socket.
        with self.d.connect("unix") as c:
            self.assertHit(c.request("HIT method=GET path=/status"), True, 992, (58, 60))

    def test_pantry_one_per_day(self):
        with self.d.connect("tcp") as c:
            replies = [c.request("HIT method=GET path=/pantry/%s ip=10.7.7.7" % item)
                       for item in ("milk", "eggs", "cookies")]
        # /pantry/cookies (no trailing slash) is not /pantry/cookies/*: the per-day rule.
        self.assertWindow(replies, 1, 86400)

    def test_default_deny(self):
        with self.d.connect("unix") as c:
            self.assertEqual(c.request('HIT method="DELETE" path="/index.html"'), "OK false 0 -1")
            self.assertEqual(c.request("HIT method=GET path=/pantry/cookies/oatmeal"), "OK false 0 -1",
                             "(no ip: the per-IP rules do not match)")

    def _cookies(self, kind, ip, other_ip):
        with self.d.connect(kind) as c:
            replies = [c.request("HIT method=GET path=/pantry/cookies/%s ip=%s" % (cookie, ip))
                       for cookie in ("chocolate-chip", "chocolate-chip", "oatmeal", "cricket-flavored")]
            self.assertWindow(replies, 3, 3600, msg="(cookies, %s)" % kind)
            # A different IP: fresh quota.
            self.assertHit(c.request("HIT method=GET path=/pantry/cookies/oatmeal ip=%s" % other_ip),
                           True, 2, 3600, "(other ip)")

    def test_cookies_transcript_tcp(self):
        self._cookies("tcp", "192.168.1.1", "4.3.2.1")

    def test_cookies_transcript_unix(self):
        self._cookies("unix", "192.168.7.7", "4.3.2.7")


class ExampleIni(_ExampleBase, harness.DaemonTestCase):
    example = "example-config.ini"


class ExampleJson(_ExampleBase, harness.DaemonTestCase):
    example = "example-config.json"


class _CanaryBase(_OnExample):  # mixin: not a test case by itself
    """The "Example canary rule" transcript: the canary is counted, the next rule decides."""

    def test_canary_transcript(self):
        with self.d.connect("tcp") as c:
            replies = [c.request("HIT method=GET path=/pantry/cookies/special-cookie ip=192.168.1.1")
                       for _ in range(4)]
        # The answers are the cookies rule's (3 per hour per IP), not the canary's (1 per day).
        self.assertWindow(replies, 3, 3600)

    def test_other_cookies_unaffected_by_canary(self):
        with self.d.connect("tcp") as c:
            replies = [c.request("HIT method=GET path=/pantry/cookies/oatmeal ip=10.1.1.1")
                       for _ in range(4)]
        self.assertWindow(replies, 3, 3600)


class CanaryIni(_CanaryBase, harness.DaemonTestCase):
    example = "canary-config.ini"


class CanaryJson(_CanaryBase, harness.DaemonTestCase):
    example = "canary-config.json"


class _ReadmeActorsBase:  # mixin: not a test case by itself
    """The "Actors and multi-tenancy" transcript, on that exact rule."""

    config = None

    def test_actors_transcript(self):
        d = self.start_daemon(data_path(self.config))
        with d.connect("tcp") as c:
            replies = [c.request("HIT method=GET ip=10.20.1.3") for _ in range(3)]
            self.assertWindow(replies, 100, 60)
            # Different ip: fresh quota!
            self.assertHit(c.request("HIT method=GET ip=192.168.1.1"), True, 99, 60)
            # The first actor's counter is untouched by the second.
            self.assertHit(c.request("HIT method=GET ip=10.20.1.3"), True, 96, (58, 60))
            # "Default accept!": creditLimit 1, resetSeconds 0.
            self.assertEqual(c.request("HIT method=POST ip=10.20.1.3"), "OK true 1 0")
            self.assertEqual(c.request("HIT"), "OK true 1 0")


class ReadmeActorsIni(_ReadmeActorsBase, harness.DaemonTestCase):
    config = "readme-actors.ini"


class ReadmeActorsJson(_ReadmeActorsBase, harness.DaemonTestCase):
    config = "readme-actors.json"


class Rules(harness.DaemonTestCase):
    """Rule semantics on tests/data/itest.ini."""

    @classmethod
    def setUpClass(cls):
        cls.d = cls.start_shared_daemon(data_path("itest.ini"))

    def test_default_deny(self):
        with self.d.connect("tcp") as c:
            self.assertEqual(c.request("HIT foo=bar"), "OK false 0 -1")
            self.assertEqual(c.request("HIT"), "OK false 0 -1")
            self.assertEqual(c.request("HIT method=DELETE path=/index.html"), "OK false 0 -1")

    def test_always_allow(self):
        with self.d.connect("unix") as c:
            for _ in range(10):  # more than creditLimit: nothing is counted
                self.assertEqual(c.request("HIT path=/open"), "OK true 5 0")

    def test_always_deny(self):
        with self.d.connect("tcp") as c:
            for _ in range(3):
                self.assertEqual(c.request("HIT path=/closed"), "OK false 0 -1")

    def test_actors_get_fresh_quota(self):
        a, b = uid("a"), uid("b")
        with self.d.connect("tcp") as c:
            self.assertHit(c.request("HIT path=/probe user=" + a), True, 9, 3600)
            self.assertHit(c.request("HIT path=/probe user=" + a), True, 8, self.since_start(3600))
            self.assertHit(c.request("HIT path=/probe user=" + b), True, 9, 3600)
            self.assertHit(c.request("HIT user=%s path=/probe" % a), True, 7, self.since_start(3600),
                           "(key order does not matter)")

    def test_exhaustion(self):
        u = uid("ex")
        with self.d.connect("tcp") as c:
            replies = [c.request("HIT path=/probe user=" + u) for _ in range(13)]
        self.assertWindow(replies, 10, 3600)

    def test_quoted_values(self):
        u = uid("q")
        with self.d.connect("tcp") as c:
            self.assertHit(c.request('HIT "path"="/probe" "user"="%s with spaces"' % u), True, 9, 3600)
            self.assertHit(c.request('HIT path=/probe user="%s with spaces"' % u), True, 8, self.since_start(3600))
            # Not the same actor as the unquoted prefix.
            self.assertHit(c.request("HIT path=/probe user=%s" % u), True, 9, 3600)

    def test_canary_does_not_decide(self):
        u = uid("c")
        with self.d.connect("tcp") as c:
            # The canary (2 per hour) runs out after two hits; the rule after it (5 per
            # hour) keeps deciding.
            replies = [c.request("HIT path=/canary/x user=" + u) for _ in range(7)]
            self.assertWindow(replies, 5, 3600)
            # Matching only the canary falls through to the default (deny).
            self.assertEqual(c.request("HIT path=/canary/y user=" + u), "OK false 0 -1")


class Framing(harness.DaemonTestCase):
    """Line framing, pipelining edge cases and protocol errors on itest.ini."""

    @classmethod
    def setUpClass(cls):
        cls.d = cls.start_shared_daemon(data_path("itest.ini"))

    def probe(self, user):
        """The probe counter of user on a new connection: proves whether a request ran."""
        return self.d.request("HIT path=/probe user=" + user, "unix")

    def expect_error_then_close(self, payload, code, probe_user=None):
        with self.d.connect("tcp") as c:
            c.send(payload)
            lines = c.read_until_eof()
        self.assertGreaterEqual(len(lines), 1, "no reply to %r" % payload[:80])
        self.assertTrue(lines[-1].startswith("ERR %s" % code), "reply %r to %r" % (lines, payload[:80]))
        if probe_user:
            # The request after the bad line was never executed.
            self.assertHit(self.probe(probe_user), True, 9, 3600, "(request after the bad line ran)")
        return lines

    def test_byte_by_byte(self):
        u = uid("bb")
        payload = ("HIT path=/probe user=%s\nHIT path=/open\r\nHIT path=/probe user=%s\n" % (u, u)).encode()
        with self.d.connect("tcp") as c:
            for i in range(len(payload)):
                c.send(payload[i:i + 1])
                if i % 7 == 0:
                    time.sleep(0.001)  # let some bytes arrive in separate segments
            replies = c.readlines(3)
        self.assertHit(replies[0], True, 9, 3600)
        self.assertEqual(replies[1], "OK true 5 0")
        self.assertHit(replies[2], True, 8, self.since_start(3600))

    def test_crlf(self):
        with self.d.connect("tcp") as c:
            self.assertEqual(c.request("HIT path=/open\r"), "OK true 5 0")

    def test_longest_line_accepted(self):
        head = "HIT path=/open pad="
        line = head + "a" * (8192 - len(head))
        self.assertEqual(len(line), 8192)
        with self.d.connect("tcp") as c:
            self.assertEqual(c.request(line), "OK true 5 0")
            self.assertEqual(c.request("HIT path=/open"), "OK true 5 0")

    def test_oversize_line(self):
        u = uid("ov")
        head = "HIT path=/open pad="
        line = head + "a" * (8193 - len(head))
        self.expect_error_then_close(line + "\nHIT path=/probe user=%s\n" % u, "", u)

    def test_oversize_line_without_newline(self):
        # The daemon must not wait for a "\n" that would make it buffer without bound.
        with self.d.connect("tcp") as c:
            c.send("HIT path=/open pad=" + "a" * 20000)
            lines = c.read_until_eof()
        self.assertEqual(len(lines), 1, lines)
        self.assertTrue(lines[0].startswith("ERR "), lines)

    def test_unknown_command(self):
        u = uid("uc")
        lines = self.expect_error_then_close("FOO\nHIT path=/probe user=%s\n" % u, "unknown-command", u)
        self.assertEqual(len(lines), 1, lines)

    def test_empty_line(self):
        u = uid("el")
        lines = self.expect_error_then_close("\nHIT path=/probe user=%s\n" % u, "unknown-command", u)
        self.assertEqual(len(lines), 1, lines)

    def test_error_mid_pipeline(self):
        u = uid("pe")
        with self.d.connect("tcp") as c:
            c.send("HIT path=/probe user=%s\nFOO bar=1\nHIT path=/probe user=%s\n" % (u, u))
            lines = c.read_until_eof()
        self.assertEqual(len(lines), 2, lines)
        self.assertHit(lines[0], True, 9, 3600)
        self.assertTrue(lines[1].startswith("ERR unknown-command"), lines)
        # Only the request before the bad line ran.
        self.assertHit(self.probe(u), True, 8, self.since_start(3600))

    def test_malformed_pairs(self):
        for bad in ('HIT a="unterminated', "HIT novalue", 'HIT a=b"c', "HIT =value"):
            with self.subTest(bad=bad):
                u = uid("mp")
                lines = self.expect_error_then_close(bad + "\nHIT path=/probe user=%s\n" % u, "unknown", u)
                self.assertEqual(len(lines), 1, lines)
                self.assertTrue(lines[0].startswith('ERR unknown "'), lines)
                self.assertTrue(lines[0].endswith('"'), lines)

    def test_half_close(self):
        u = uid("hc")
        n = 300
        with self.d.connect("tcp") as c:
            c.send("".join("HIT path=/big user=%s\n" % u for _ in range(n)))
            c.shutdown_write()
            lines = c.read_until_eof()
        self.assertEqual(len(lines), n)
        self.assertWindow(lines, 100000, 3600)

    def test_half_close_unix(self):
        u = uid("hu")
        with self.d.connect("unix") as c:
            c.send("HIT path=/probe user=%s\nHIT path=/probe user=%s\n" % (u, u))
            c.shutdown_write()
            lines = c.read_until_eof()
        self.assertWindow(lines, 10, 3600)
        self.assertEqual(len(lines), 2)

    def test_unterminated_last_line(self):
        u = uid("ut")
        with self.d.connect("tcp") as c:
            c.send("HIT path=/open\nHIT path=/probe user=" + u)
            c.shutdown_write()
            lines = c.read_until_eof()
        self.assertEqual(len(lines), 2, lines)
        self.assertEqual(lines[0], "OK true 5 0")
        self.assertHit(lines[1], True, 9, 3600)

    def test_peer_reset_does_not_hurt(self):
        # A client that vanishes with unanswered requests (RST) must not take the daemon down.
        c = self.d.connect("tcp")
        c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.send("HIT path=/open\n" * 1000)
        c.close()
        self.assertEqual(self.d.request("HIT path=/open"), "OK true 5 0")


SO_SNDBUFFORCE = 32  # <asm-generic/socket.h>: SO_SNDBUF beyond wmem_max (needs CAP_NET_ADMIN)


DISCARD_PASS = 64 * 4096  # bytes connection_discard_input() reads per call


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


if __name__ == "__main__":
    harness.main()
