#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The protocol version 2 verbs (issue #15) over real sockets: HELLO, TAKE, PEEK, CHARGE,
REFUND, RESET, EXPLAIN, on every algorithm, continue rules, canaries and the admin listener,
against tests/data/verbs.ini (one credit per 360 s: nothing refills while a test runs; the
reset and retry bounds are computed from measured time). What Envoy's descriptors need (issue
#34): windows aligned to the clock (on a controlled clock), actors of several fields and
matchKeys exact, against tests/data/rules-envoy.ini.

Run one test:  tests/integration/test_verbs.py Verbs.test_token_bucket
"""

import itertools
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import data_path  # noqa: E402

_ids = itertools.count(1)


def uid(prefix):
    return "%s-%d-%d" % (prefix, os.getpid(), next(_ids))


FIELD_RE = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def fields(reply):
    """'OK a=1 b=x' -> {'a': '1', 'b': 'x'}; fails the caller's assertion if not OK."""
    assert reply.startswith("OK "), reply
    return dict(FIELD_RE.findall(reply[3:]))


def decision(reply):
    f = fields(reply)
    return (f["allowed"] == "true", int(f["credit"]), int(f["limit"]), int(f["reset"]),
            int(f["retry"]), f["rule"])


class Verbs(harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = cls.start_shared_daemon(data_path("verbs.ini"))

    def req(self, line, c=None):
        if c is not None:
            return c.request(line)
        return self.d.request(line)

    def bounds(self, t0, full):
        """(lo, hi) for a reset or retry of `full` seconds counted from t0 (monotonic)."""
        return harness.elapsed_bounds(full, t0)

    def assertSecs(self, got, full, t0):
        lo, hi = self.bounds(t0, full)
        self.assertTrue(lo <= got <= hi, "%d not in [%d, %d]" % (got, lo, hi))

    def test_hello(self):
        f = fields(self.req("HELLO"))
        self.assertEqual(f["proto"], "2")
        self.assertTrue(f["server"].startswith("divvyd/"), f)
        self.assertEqual(f["verbs"].split(","),
                         ["HIT", "HELLO", "TAKE", "PEEK", "CHARGE", "REFUND", "RESET", "EXPLAIN"])
        self.assertEqual(self.req("hello"), self.req("HELLO"))  # verbs in any case, like HIT

    def test_token_bucket(self):
        u = uid("tb")
        t0 = time.monotonic()
        with self.d.connect() as c:
            ok, credit, limit, reset, retry, rule = decision(c.request("TAKE 1 path=/tb user=" + u))
            self.assertEqual((ok, credit, limit, retry, rule), (True, 4, 5, 0, "tb"))
            self.assertSecs(reset, 360, t0)  # full again one interval later
            ok, credit, limit, reset, retry, rule = decision(c.request("TAKE 4 path=/tb user=" + u))
            self.assertEqual((ok, credit, retry), (True, 0, 0))
            self.assertSecs(reset, 1800, t0)
            # empty: the next credit comes one interval (360 s) later
            ok, credit, limit, reset, retry, rule = decision(c.request("TAKE 1 path=/tb user=" + u))
            self.assertEqual((ok, credit), (False, 0))
            self.assertSecs(retry, 360, t0)
            self.assertEqual(reset, retry)
            # more than the bucket holds can never pass
            ok, credit, limit, reset, retry, rule = decision(c.request("PEEK 6 path=/tb user=" + u))
            self.assertEqual((ok, retry), (False, -1))
            # CHARGE goes into debt: later TAKEs wait longer
            ok, credit, limit, reset, retry, rule = decision(c.request("CHARGE 2 path=/tb user=" + u))
            self.assertFalse(ok)
            ok, credit, limit, reset, retry, rule = decision(c.request("PEEK path=/tb user=" + u))
            self.assertFalse(ok)
            self.assertSecs(retry, 3 * 360, t0)
            # HIT is divvy's reply shape on the same counter
            self.assertEqual(harness.parse_ok(c.request("HIT path=/tb user=" + u))[:2], (False, 0))
        with self.d.connect("unix") as c:  # not an admin listener
            self.assertEqual(c.request("REFUND 3 path=/tb user=" + u),
                             'ERR forbidden "REFUND needs an admin listener"')
            self.assertTrue(c.at_eof())

    def test_fixed_window(self):
        u = uid("fw")
        t0 = time.monotonic()
        ok, credit, limit, reset, retry, rule = decision(self.req("TAKE 4 path=/fw user=" + u))
        self.assertEqual((ok, credit, limit, retry, rule), (True, 6, 10, 0, "fw"))
        self.assertSecs(reset, 3600, t0)
        ok, credit, lo, reset, retry, rule = decision(self.req("PEEK 7 path=/fw user=" + u))
        self.assertEqual((ok, credit), (False, 6))
        self.assertSecs(retry, 3600, t0)
        ok, credit, lo, reset, retry, rule = decision(self.req("PEEK 11 path=/fw user=" + u))
        self.assertEqual((ok, retry), (False, -1))
        # PEEK wrote nothing; HIT sees the TAKE
        got = harness.parse_ok(self.req("HIT path=/fw user=" + u))
        self.assertEqual(got[:2], (True, 5))
        # CHARGE clamps at zero
        ok, credit, lo, reset, retry, rule = decision(self.req("CHARGE 9 path=/fw user=" + u))
        self.assertEqual((ok, credit), (False, 0))
        self.assertEqual(harness.parse_ok(self.req("HIT path=/fw user=" + u))[:2], (False, 0))

    def test_sliding_window(self):
        u = uid("sw")
        ok, credit, limit, reset, retry, rule = decision(self.req("TAKE 3 path=/sw user=" + u))
        self.assertEqual((ok, credit, limit, retry, rule), (True, 7, 10, 0, "sw"))
        ok, credit, limit, reset, retry, rule = decision(self.req("TAKE 8 path=/sw user=" + u))
        self.assertEqual((ok, credit), (False, 7))
        self.assertGreaterEqual(retry, 1)
        ok, credit, limit, reset, retry, rule = decision(self.req("TAKE 7 path=/sw user=" + u))
        self.assertEqual((ok, credit), (True, 0))

    def test_continue_all_or_nothing(self):
        u1, u2, path = uid("u"), uid("u"), "/multi/" + uid("p")
        with self.d.connect() as c:
            # per-user allows 3, per-path 5: the binding rule has the smallest credit
            for i in range(3):
                ok, credit, limit, reset, retry, rule = decision(
                    c.request("TAKE 1 path=%s user=%s" % (path, u1)))
                self.assertEqual((ok, credit, rule), (True, 2 - i, "per-user"))
            # per-user denies: per-path is not charged
            ok, credit, limit, reset, retry, rule = decision(
                c.request("TAKE 1 path=%s user=%s" % (path, u1)))
            self.assertEqual((ok, rule), (False, "per-user"))
            self.assertEqual(harness.parse_ok(c.request("HIT path=%s user=%s" % (path, u1)))[:2],
                             (False, 0))
            # another user: per-path has 2 left, so it binds
            ok, credit, limit, reset, retry, rule = decision(
                c.request("PEEK path=%s user=%s" % (path, u2)))
            self.assertEqual((ok, credit, rule), (True, 1, "per-path"))
            self.assertEqual(harness.parse_ok(c.request("HIT path=%s user=%s" % (path, u2)))[:2],
                             (True, 1))
            # TAKE 2 fits per-user (3 left) but not per-path (1 left): nothing charged
            ok, credit, limit, reset, retry, rule = decision(
                c.request("TAKE 2 path=%s user=%s" % (path, u2)))
            self.assertEqual((ok, rule), (False, "per-path"))
            ok, credit, limit, reset, retry, rule = decision(
                c.request("PEEK 0 path=%s user=%s" % (path, u2)))
            self.assertEqual((ok, credit), (True, 1))

    def test_always_deny_enforcing_rule(self):
        u = uid("n")
        self.assertEqual(self.req("HIT path=/never user=" + u), "OK false 0 -1")
        ok, credit, limit, reset, retry, rule = decision(self.req("TAKE 1 path=/never user=" + u))
        self.assertEqual((ok, retry, rule), (False, -1, "never"))
        # nothing was charged on the stop rule's counter
        ok, credit, limit, reset, retry, rule = decision(self.req("PEEK 0 path=/never user=" + u))
        self.assertEqual((ok, retry), (False, -1))

    def test_canary_charged_alone(self):
        u = uid("c")
        # the canary (1 per hour) denies from the second hit on; the token bucket decides
        for credit in (9, 8):
            self.assertEqual(harness.parse_ok(self.req("HIT path=/canary/x user=" + u))[:2],
                             (True, credit))
        ok, credit, limit, reset, retry, rule = decision(self.req("TAKE 2 path=/canary/x user=" + u))
        self.assertEqual((ok, credit, rule), (True, 6, "canaried"))

    def test_explain(self):
        u, path = uid("e"), "/multi/" + uid("p")
        f = fields(self.req("EXPLAIN path=%s user=%s" % (path, u)))
        self.assertEqual(f["rule"], "per-path")
        self.assertEqual(f["index"], "4")
        self.assertEqual(f["policy"], "stop")
        self.assertEqual(f["actor"], '"%s"' % path)
        self.assertEqual(f["algorithm"], "fixed-window")
        self.assertEqual(f["canaries"], "-")
        self.assertEqual(f["continue"], "per-user")
        f = fields(self.req("EXPLAIN path=/canary/x user=" + u))
        self.assertEqual((f["rule"], f["algorithm"], f["canaries"]), ("canaried", "token-bucket", "canary"))
        # EXPLAIN changed nothing
        self.assertEqual(harness.parse_ok(self.req("HIT path=%s user=%s" % (path, u)))[:2], (True, 2))

    def test_bad_counts(self):
        for line in ("TAKE path=/fw user=x", "TAKE 0 path=/fw user=x", "CHARGE -1 path=/fw",
                     "TAKE 99999999999999999999 path=/fw", "RESET 1 path=/fw"):
            with self.d.connect() as c:
                reply = c.request(line)
                self.assertTrue(reply.startswith("ERR bad-count"), (line, reply))
                self.assertTrue(c.at_eof())

    def test_pipelined_mix_in_order(self):
        u = uid("p")
        lines = ["HIT path=/fw user=" + u, "TAKE 2 path=/fw user=" + u, "HELLO",
                 "PEEK path=/fw user=" + u, "HIT path=/fw user=" + u] * 3
        with self.d.connect() as c:
            replies = c.pipeline(lines)
        # per round: HIT -1, TAKE 2 -2, HELLO, PEEK (shows a TAKE 1, writes nothing), HIT -1
        want = [(True, 9), (True, 7), None, (True, 6), (True, 6),
                (True, 5), (True, 3), None, (True, 2), (True, 2),
                (True, 1), (False, 1), None, (True, 0), (True, 0)]
        self.assertEqual(len(replies), len(want))
        for line, reply, w in zip(lines, replies, want):
            if w is None:
                self.assertTrue(reply.startswith("OK proto=2 "), reply)
            elif line.startswith("HIT"):
                self.assertEqual(harness.parse_ok(reply)[:2], w, (line, reply))
            else:
                self.assertEqual(decision(reply)[:2], w, (line, reply))


class EnvoyAttributes(harness.DaemonTestCase):
    """What Envoy's descriptors need (issue #34) on the line protocol and RESP, against
    tests/data/rules-envoy.ini: an actor of several fields, matchKeys exact."""

    @classmethod
    def setUpClass(cls):
        cls.d = cls.start_shared_daemon(data_path("rules-envoy.ini"))

    def req(self, line):
        return self.d.request(line)

    def test_actor_of_two_fields(self):
        # actorField = ip user: one counter per (ip, user), whatever the bytes (a naive join of
        # "a,b" and "c" would be that of "a" and "b,c"), the request's order and other fields
        u = uid("c")
        hit = lambda rest: harness.parse_ok(self.req("HIT path=/combo " + rest))[:2]  # noqa: E731
        self.assertEqual(hit("ip=a,b user=c-" + u), (True, 0))
        self.assertEqual(hit("ip=a,b user=c-" + u), (False, 0))
        self.assertEqual(hit("ip=a user=b,c-" + u), (True, 0))
        self.assertEqual(hit("user=c-%s extra=1 ip=a,b" % u), (False, 0))
        self.assertEqual(hit("ip=a,b user=d-" + u), (True, 0))
        # an absent field counts as its empty value
        self.assertEqual(hit("ip=%s" % u), (True, 0))
        self.assertEqual(hit("ip=%s user=" % u), (False, 0))
        # RESP counts on the same counters
        with self.d.connect() as c:
            got = resp_decision(c, "TAKE", "1", "path", "/combo", "ip", "a,b", "user", "c-" + u)
            self.assertEqual((got[0], got[1], got[5]), (False, 0, "combo"))
            self.assertTrue(3599 <= got[4] <= 3600, got)
        f = fields(self.req("EXPLAIN path=/combo ip=a,b user=c-" + u))
        self.assertEqual((f["rule"], f["actor"]), ("combo", '"3:a,b,%d:c-%s,"' % (len(u) + 2, u)))

    def test_match_keys_exact(self):
        # [domain=api path=*] with matchKeys = exact: only requests of exactly those two keys
        p = "/x-" + uid("k")
        self.assertEqual(decision(self.req("TAKE 1 domain=api path=" + p))[::5], (True, "exact"))
        self.assertEqual(decision(self.req("TAKE 1 path=%s domain=api" % p))[::5], (False, "exact"))
        self.assertEqual(decision(self.req("PEEK 1 domain=api path=" + p))[:2], (False, 0))
        for extra in ("user=u", "domain2=api", "a="):
            f = fields(self.req("EXPLAIN domain=api path=%s %s" % (p, extra)))
            self.assertNotEqual(f["rule"], "exact", extra)  # the default rule
            self.assertEqual(self.req("HIT domain=api path=%s %s" % (p, extra)), "OK false 0 -1")
        self.assertEqual(fields(self.req("EXPLAIN path=%s domain=api" % p))["rule"], "exact")


class AlignedWindow(harness.DaemonTestCase):
    """window = aligned (issue #34) on the daemon's controlled wall clock (fakeclock.c): windows
    at the multiples of resetSeconds since the epoch, their end in every reply; divvy's window
    beside it starts at the first hit."""

    HOUR = 1764000000  # s: a multiple of 3600 (2025-11-24 16:00 UTC)

    @classmethod
    def setUpClass(cls):
        cls.d = cls.start_shared_daemon_on_clock(data_path("rules-envoy.ini"), cls.HOUR * 10**9)

    def at(self, s):
        self.clock.set(int(round((self.HOUR + s) * 10**9)))

    def test_aligned_window(self):
        u = uid("al")
        with self.d.connect() as c:
            self.at(1800.5)
            self.assertEqual(decision(c.request("TAKE 1 path=/aligned user=" + u)),
                             (True, 1, 2, 1800, 0, "aligned"))  # 1799.5 s to the hour, rounded up
            self.assertEqual(decision(c.request("TAKE 1 path=/fw user=" + u))[3], 3600)  # divvy's
            self.assertEqual(c.request("HIT path=/aligned user=" + u), "OK true 0 1800")
            self.at(3599)
            self.assertEqual(c.request("HIT path=/aligned user=" + u), "OK false 0 1")
            self.assertEqual(decision(c.request("PEEK 1 path=/aligned user=" + u)),
                             (False, 0, 2, 1, 1, "aligned"))
            self.at(3600)  # the next hour: a new window, whole
            self.assertEqual(c.request("HIT path=/aligned user=" + u), "OK true 1 3600")
            self.at(3600 + 7199.25)
            self.assertEqual(decision(c.request("CHARGE 5 path=/aligned user=" + u)),
                             (False, 0, 2, 1, 1, "aligned"))
            self.at(3600 + 7200)
            self.assertEqual(decision(c.request("PEEK 2 path=/aligned user=" + u)),
                             (True, 0, 2, 3600, 0, "aligned"))


class Command(harness.DaemonTestCase):
    """The divvy command's version 2 subcommands against the real daemon."""

    def divvy(self, d, *args, admin=None):
        import subprocess
        addr = "unix:" + admin if admin else "tcp:127.0.0.1:%d" % d.port
        p = subprocess.run([os.path.join(harness.top_builddir(), "src", "divvy"), "-a", addr] + list(args),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=harness.IO_TIMEOUT)
        return p.returncode, p.stdout.strip(), p.stderr.strip()

    def test_take_peek_reset_explain(self):
        d = self.new_daemon(data_path("verbs.ini"))
        admin = os.path.join(d.tmpdir, "admin.sock")
        d.args += ["--listen", "admin:unix:" + admin]
        d.start()
        u = uid("cli")
        rc, out, err = self.divvy(d, "take", "3", "path=/tb", "user=" + u)
        self.assertEqual(rc, 0, err)
        self.assertTrue(out.startswith("allowed=true credit=2 limit=5 "), out)
        rc, out, err = self.divvy(d, "take", "3", "path=/tb", "user=" + u)
        self.assertEqual(rc, 1, err)
        self.assertTrue(out.startswith("allowed=false credit=2 "), out)
        rc, out, err = self.divvy(d, "peek", "9", "path=/tb", "user=" + u)
        self.assertEqual(rc, 1)
        self.assertIn("retry=-1", out)
        rc, out, err = self.divvy(d, "explain", "path=/tb", "user=" + u)
        self.assertEqual(rc, 0, err)
        self.assertIn("tb", out)
        rc, out, err = self.divvy(d, "reset", "path=/tb", "user=" + u)
        self.assertEqual(rc, 2, out)  # not an admin listener
        self.assertIn("forbidden", err)
        rc, out, err = self.divvy(d, "reset", "path=/tb", "user=" + u, admin=admin)
        self.assertEqual((rc, out), (0, "reset=1"), err)
        self.assertEqual(self.divvy(d, "hit", "path=/tb", "user=" + u)[:2], (0, "true 4 360"))


class ClientTime(harness.DaemonTestCase):
    def test_client_timestamps(self):
        """@time on TAKE/PEEK/CHARGE: off by default, bounded in age, never in the future."""
        d = self.start_daemon(data_path("verbs.ini"), args=["--client-time-max-age", "3600"])
        u = uid("t")
        now = int(time.time())
        # the bucket (5 at once, one back every 360 s) emptied 1800 s ago is full again now
        self.assertEqual(decision(d.request("TAKE 5 @%d path=/tb user=%s" % (now - 1800, u)))[:2],
                         (True, 0))
        self.assertEqual(decision(d.request("PEEK path=/tb user=" + u))[:2], (True, 4))
        # a time in the future is now: emptied now
        u2 = uid("t")
        self.assertEqual(decision(d.request("TAKE 5 @%d.5 path=/tb user=%s" % (now + 1000, u2)))[0],
                         True)
        ok, credit, limit, reset, retry, rule = decision(d.request("PEEK path=/tb user=" + u2))
        self.assertEqual((ok, credit), (False, 0))
        self.assertLessEqual(retry, 360)
        self.assertEqual(d.request("TAKE 1 @%d path=/tb user=%s" % (now - 7300, u)),
                         'ERR bad-time "timestamp older than --client-time-max-age"')
        off = self.start_daemon(data_path("verbs.ini"))
        self.assertEqual(off.request("PEEK @%d path=/tb user=%s" % (now, u)),
                         'ERR bad-time "client timestamps are off (--client-time-max-age)"')


def resp_decision(c, *args):
    """A RESP TAKE/PEEK/CHARGE on connection c: (allowed, credit, limit, reset, retry, rule)."""
    c.send(harness.resp_command(*args))
    head = c.readline()
    assert head == "*6\r", "not a decision: %r (%r)" % (head, c.buf)
    ints = []
    for _ in range(5):
        line = c.readline()
        assert line.startswith(":"), line
        ints.append(int(line[1:-1]))
    c.readline()  # the rule's bulk string: "$<len>", then the label
    rule = c.readline()[:-1]
    return (ints[0] == 1, ints[1], ints[2], ints[3], ints[4], rule)


class ChargeDebt(harness.DaemonTestCase):
    """The largest CHARGE a client may send leaves a bounded wait on every algorithm, over the
    line protocol and RESP, and the bound survives a restart (after SIGKILL: the journal; after
    SIGTERM: the checkpoint). tests/data/charge-debt.ini states each rule's bound."""

    COUNT_MAX = 9007199254740991  # PROTO_COUNT_MAX, 2^53 - 1
    # path: (retry, reset) of a fresh counter after CHARGE COUNT_MAX, which is also the bound
    BOUNDS = {
        "/login": (360, 600),  # token bucket 5 per 300 s: 6 credits, and 10 to be full
        "/strict": (360, 600),
        "/refill": (3600, 3600),  # 5 every 1800 s: two refills either way
        "/fixed": (300, 300),
        "/sliding": (360, 600),  # the next window once the charged one weighs 4 of 5
    }

    def assertWait(self, got, full, t0, what):
        lo, hi = harness.elapsed_bounds(full, t0)
        self.assertTrue(lo <= got <= hi, "%s: %d not in [%d, %d]" % (what, got, lo, hi))

    def test_max_charge_bounded(self):
        d = self.start_daemon(data_path("charge-debt.ini"), args=["--sync=always"])
        ip = uid("203.0.113.7")
        t0 = time.monotonic()
        actors = []
        with d.connect() as line, d.connect() as resp:
            for path, (retry, reset) in sorted(self.BOUNDS.items()):
                for proto in ("line", "resp"):
                    actor = "%s-%s" % (ip, proto)
                    what = "%s %s" % (path, proto)
                    if proto == "line":
                        got = decision(line.request("CHARGE %d path=%s ip=%s" %
                                                    (self.COUNT_MAX, path, actor)))
                    else:
                        got = resp_decision(resp, "CHARGE", str(self.COUNT_MAX), "path", path,
                                            "ip", actor)
                    self.assertEqual(got[:3], (False, 0, 5), what)
                    self.assertWait(got[4], retry, t0, what + " CHARGE retry")
                    self.assertWait(got[3], reset, t0, what + " CHARGE reset")
                    actors.append((path, actor, retry))
        # one more is refused: the count above is the largest a client can send
        self.assertEqual(d.request("CHARGE %d path=/login ip=%s" % (self.COUNT_MAX + 1, ip)),
                         'ERR bad-count "count above 9007199254740991"')

        for restart in (None, signal.SIGKILL, signal.SIGTERM):
            if restart is not None:
                d.stop(restart)
                d.start()
            with d.connect() as line:
                for path, actor, retry in actors:
                    what = "%s %s after %s" % (path, actor, restart)
                    ok, credit, limit, reset, wait, rule = decision(
                        line.request("PEEK 1 path=%s ip=%s" % (path, actor)))
                    self.assertEqual((ok, credit), (False, 0), what)  # the charge was kept
                    self.assertWait(wait, retry, t0, what)
        # divvy's HIT reply on the same counters: denied, reset (the retry-after) within the bound
        for path, actor, retry in actors:
            allowed, credit, reset = harness.parse_ok(d.request("HIT path=%s ip=%s" % (path, actor)))
            self.assertEqual((allowed, credit), (False, 0))
            self.assertTrue(1 <= reset <= retry, "%s HIT reset %d, bound %d" % (path, reset, retry))


class Admin(harness.DaemonTestCase):
    def test_refund_and_reset_on_admin_listener(self):
        d = self.new_daemon(data_path("verbs.ini"))
        admin = os.path.join(d.tmpdir, "admin.sock")
        d.args += ["--listen", "admin:unix:" + admin]
        d.start()
        self.assertEqual(os.stat(admin).st_mode & 0o777, 0o600)
        u = uid("a")
        self.assertEqual(fields(d.request("TAKE 5 path=/tb user=" + u))["credit"], "0")
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(harness.IO_TIMEOUT)
        s.connect(admin)
        with harness.Conn(s) as c:
            ok, credit, limit, reset, retry, rule = decision(c.request("REFUND 2 path=/tb user=" + u))
            self.assertEqual((ok, credit), (True, 2))
            # capped at the capacity
            ok, credit, limit, reset, retry, rule = decision(c.request("REFUND 99 path=/tb user=" + u))
            self.assertEqual((ok, credit), (True, 5))
            # refund never creates a counter
            fresh = uid("a")
            c.request("REFUND 3 path=/tb user=" + fresh)
            self.assertEqual(c.request("RESET path=/tb user=" + fresh), "OK reset=0")
            self.assertEqual(fields(c.request("TAKE 1 path=/fw user=" + u))["credit"], "9")
            self.assertEqual(c.request("RESET path=/fw user=" + u), "OK reset=1")
            self.assertEqual(c.request("RESET path=/fw user=" + u), "OK reset=0")
        self.assertEqual(harness.parse_ok(d.request("HIT path=/fw user=" + u))[:2], (True, 9))
        self.assertEqual(d.request("RESET path=/fw user=" + u),
                         'ERR forbidden "RESET needs an admin listener"')
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    harness.main()
