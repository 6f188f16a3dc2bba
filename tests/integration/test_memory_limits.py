#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A client flooding new actors against a cap or a memory limit: only its own requests fail.

--max-counters: while one client floods new actors, another client's requests on an existing
counter are all answered normally; the flood's requests beyond the cap answer
ERR unknown "counter limit reached", counted in divvyd_store_counters_refused_total and
STATUS=. An address-space limit (prlimit --as, when the machine has prlimit): the flood fills
memory until the table cannot grow; the other client's requests are still all answered; after
a SIGKILL divvyd starts again under the same limit and every acknowledged hit is there.

Run one test:  tests/integration/test_memory_limits.py MaxCounters.test_flood_refused_existing_served
"""

import os
import re
import shutil
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultlib  # noqa: E402
import harness  # noqa: E402
from faultlib import report  # noqa: E402

RULES = """\
[path=/keep user=*]
creditLimit = 1000000
resetSeconds = 3600
actorField = user

[default]
creditLimit = 0
resetSeconds = 0
"""

REFUSED = 'ERR unknown "counter limit reached"'
CHUNK = 500  # requests pipelined per write


def allowed_credit(reply):
    """The credit of an allowed HIT's reply on a /keep counter (whose window, 3600 s, started
    within the test), or the reply itself if it is anything else."""
    ok = harness.parse_ok(reply)
    return ok[1] if ok and ok[0] and 3000 <= ok[2] <= 3600 else reply


def write_rules(d_tmp):
    path = os.path.join(d_tmp, "rules.ini")
    with open(path, "w") as f:
        f.write(RULES)
    return path


def flood(d, prefix, until_errors, max_requests):
    """New actors prefix-0, prefix-1, ... pipelined, reconnecting after each ERR (it closes the
    connection). Returns (acknowledged actor numbers, the ERR replies), once until_errors ERR
    replies came or max_requests were sent."""
    acked, errors, k = [], [], 0
    while len(errors) < until_errors and k < max_requests:
        with d.connect("tcp") as c:
            while len(errors) < until_errors and k < max_requests:
                first = k
                try:
                    c.send("".join("HIT path=/keep user=%s-%d\n" % (prefix, k + i) for i in range(CHUNK)))
                except OSError:  # closed after an ERR while we wrote: its replies are read below
                    pass
                replies = c.readlines(CHUNK)
                for i, r in enumerate(replies):
                    if r.startswith("ERR"):
                        errors.append(r)
                        break
                    ok = harness.parse_ok(r)
                    if not ok or not ok[0]:
                        raise AssertionError("flood: %r" % r)
                    acked.append(first + i)
                if replies and replies[-1].startswith("ERR"):
                    # that actor was refused; the ones after it were not executed: sent again
                    k = first + len(replies)
                    break
                if len(replies) < CHUNK:
                    raise AssertionError("flood: the connection closed without an ERR")
                k = first + CHUNK
    return acked, errors


class Victim(threading.Thread):
    """Another client: n requests on its one existing counter, pipelined 10 at a time, on one
    connection (an ERR would close it). Records every reply."""

    def __init__(self, d, actor, n):
        super().__init__(daemon=True)
        self.d, self.actor, self.n = d, actor, n
        self.replies = []
        self.error = None

    def run(self):
        try:
            with self.d.connect("tcp") as c:
                for _ in range(self.n // 10):
                    self.replies += c.pipeline(["HIT path=/keep user=%s" % self.actor] * 10)
                    if any(r is None or not r.startswith("OK") for r in self.replies[-10:]):
                        return
        except Exception as e:  # reported by the test
            self.error = e


class MaxCounters(harness.DaemonTestCase):
    def test_flood_refused_existing_served(self):
        cap, n_victim = 300, 3000
        tmp = harness.make_tmpdir()
        self.addCleanup(shutil.rmtree, tmp, True)
        http_port = harness.free_tcp_port()
        d = self.start_daemon(write_rules(tmp), args=["--max-counters=%d" % cap, "--http-port", str(http_port),
                                                      "--sweep-interval", "50"])
        self.assertEqual(d.request("HIT path=/keep user=victim"), "OK true 999999 3600")

        victim = Victim(d, "victim", n_victim)
        victim.start()
        acked, errors = flood(d, "flood", until_errors=200, max_requests=50000)
        victim.join(harness.IO_TIMEOUT * 6)
        self.assertFalse(victim.is_alive(), "the victim client did not finish")
        self.assertIsNone(victim.error)

        # the flood got its counters up to the cap (the victim holds one), then refusals only
        self.assertEqual(len(acked), cap - 1)
        self.assertEqual(acked, list(range(cap - 1)))
        self.assertEqual(set(errors), {REFUSED})
        # every request of the other client was answered normally, one credit each
        self.assertEqual(len(victim.replies), n_victim)
        for i, r in enumerate(victim.replies):
            self.assertEqual(allowed_credit(r), 999998 - i, "victim request %d" % i)
        report("max-counters flood", "%d new counters refused, %d of %d requests of another client on "
               "an existing counter answered OK" % (len(errors), len(victim.replies), n_victim))

        # the cap and the refusals in the metrics and STATUS=
        def scraped():
            s = harness.prometheus_samples(harness.http_get(http_port)[2])
            return s if s.get('divvyd_store_counters_refused_total{reason="limit"}', 0) >= len(errors) else None
        samples = faultlib.wait_for(scraped, 10, "the refusals in the metrics")
        self.assertEqual(samples["divvyd_store_counters_max"], cap)
        self.assertEqual(samples["divvyd_store_counters"], cap)
        self.assertEqual(samples['divvyd_store_counters_refused_total{reason="memory"}'], 0)
        d.signal(signal.SIGHUP)  # a reload sends STATUS= again
        d.wait_note(re.compile(r"STATUS=Serving .* %d counters \(max %d, \d+ new refused\)" % (cap, cap)),
                    what="the cap in STATUS=")

        # existing counters of the flood are still served; a restart keeps all of them
        self.assertEqual(allowed_credit(d.request("HIT path=/keep user=flood-0")), 999998)
        self.assertEqual(d.stop(), 0)
        d.start()
        self.assertEqual(allowed_credit(d.request("HIT path=/keep user=flood-%d" % (cap - 2))), 999998)
        self.assertEqual(d.request("HIT path=/keep user=flood-%d" % cap), REFUSED)
        self.assertEqual(allowed_credit(d.request("HIT path=/keep user=victim")), 999998 - n_victim)


class LastCheckpoint(harness.DaemonTestCase):
    def test_failed_last_checkpoint_logged(self):
        # The last checkpoint of a clean stop does not fit under a 512 KiB map cap (LMDB's
        # checkpoints: a snapshot does not use the map): the stop is clean, the failure is
        # logged with its reason, and the journal keeps every counter.
        tmp = harness.make_tmpdir()
        self.addCleanup(shutil.rmtree, tmp, True)
        rules, db, n = write_rules(tmp), os.path.join(tmp, "db"), 20000
        d = self.start_daemon(rules, db=db, args=["--map-size", "256K", "--map-size-max", "512K",
                                                  "--checkpoint-format", "lmdb"])
        with d.connect("tcp") as c:
            for start in range(0, n, CHUNK):
                replies = c.pipeline(["HIT path=/keep user=c-%d" % k for k in range(start, start + CHUNK)])
                self.assertEqual(set(replies), {"OK true 999999 3600"})
        self.assertEqual(d.stop(), 0)
        self.assertRegex(d.log_text(), r"The last checkpoint failed, the journal will be replayed at the next "
                                       r"start: writing the checkpoint failed: .*space")

        d2 = self.start_daemon(rules, db=db)
        with d2.connect("tcp") as c:
            for start in range(0, n, 997 * 4):
                self.assertEqual(allowed_credit(c.request("HIT path=/keep user=c-%d" % start)), 999998)


class LimitedDaemon(harness.Daemon):
    """divvyd under prlimit --as=as_limit (prlimit execs it: the pid is divvyd's)."""

    as_limit = None

    def command(self):
        cmd = super().command()
        if self.as_limit:
            cmd = [shutil.which("prlimit"), "--as=%d" % self.as_limit, "--"] + cmd
        return cmd


def vmsize(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise harness.HarnessError("no VmSize for pid %d" % pid)


def sanitized(path):
    """Whether the daemon binary is built with AddressSanitizer, whose shadow memory takes
    terabytes of address space: no address-space limit leaves it room to start."""
    with open(path, "rb") as f:
        return b"__asan_init" in f.read()


@harness.may_skip_in_ci("AddressSanitizer (the CI's sanitized run) cannot start under an address-space limit")
class AddressSpaceLimit(harness.DaemonTestCase):
    # bytes of address space over an idle daemon's: the reserve for the next start's replay
    # (one journal segment, 64 MiB) and a table of a few hundred thousand counters
    HEADROOM = 96 << 20

    def setUp(self):
        super().setUp()
        if not shutil.which("prlimit"):
            self.skipTest("no prlimit")
        if os.environ.get("DIVVYD_WRAPPER"):
            self.skipTest("a wrapper (valgrind) changes the address space")
        if sanitized(harness.divvyd_path()):
            self.skipTest("AddressSanitizer cannot start under an address-space limit")

    def test_flood_then_kill_restart_same_limit(self):
        tmp = harness.make_tmpdir()
        self.addCleanup(shutil.rmtree, tmp, True)
        rules = write_rules(tmp)
        d = LimitedDaemon(rules, tmpdir=os.path.join(tmp, "d"))
        os.mkdir(d.tmpdir)
        self.addCleanup(d.cleanup)
        d.start()
        idle = vmsize(d.proc.pid)
        self.assertEqual(d.stop(), 0)
        shutil.rmtree(d.db)

        d.as_limit = idle + self.HEADROOM
        d.start()
        self.assertEqual(d.request("HIT path=/keep user=victim"), "OK true 999999 3600")
        acked, errors = flood(d, "flood", until_errors=1, max_requests=5000000)
        self.assertEqual(len(errors), 1, "the table never ran out of address space")
        # the other client's requests while the flood goes on at the limit
        victim = Victim(d, "victim", 3000)
        victim.start()
        more_errors = []
        for _ in range(10000):
            if not victim.is_alive():
                break
            more_acked, e = flood(d, "more-%d" % len(more_errors), until_errors=1, max_requests=CHUNK)
            more_errors += e
            self.assertEqual(more_acked, [])
        victim.join(harness.IO_TIMEOUT * 6)
        self.assertFalse(victim.is_alive(), "the victim client did not finish")
        self.assertIsNone(victim.error)
        errors += more_errors
        self.assertEqual(set(errors), {'ERR unknown "store error: Cannot allocate memory"'})
        # the other client's requests were all answered normally
        self.assertEqual(len(victim.replies), 3000)
        for i, r in enumerate(victim.replies):
            self.assertEqual(allowed_credit(r), 999998 - i, "victim request %d" % i)
        report("address-space limit flood", "%d new counters, then %d refused (memory); %d of %d requests "
               "of another client answered OK" % (len(acked), len(errors), len(victim.replies), 3000))

        # a crash, and a start under the same limit: every acknowledged hit is there
        d.signal(signal.SIGKILL)
        d.wait_exit()
        d.start()
        with d.connect("tcp") as c:
            for start in range(0, len(acked), CHUNK):
                part = acked[start:start + CHUNK]
                replies = c.pipeline(["HIT path=/keep user=flood-%d" % k for k in part])
                self.assertEqual(len(replies), len(part))
                for k, r in zip(part, replies):
                    self.assertEqual(allowed_credit(r), 999998, "flood-%d after the restart" % k)
        self.assertEqual(allowed_credit(d.request("HIT path=/keep user=victim")), 999998 - 3000)
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    harness.main()
