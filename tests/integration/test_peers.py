#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The peers' own test expectations against the daemon through RESP (issue #33): every line of
tests/data/peers/redis-cell.tsv and smyte.tsv (and redis-cell-derived.tsv, smyte-derived.tsv:
values derived from the peers' code where divvyd differed) sent as a RESP command to divvyd with
--allow-client-limits, its reply compared with the table's. The clock is controlled: divvyd
runs with tests/integration/fakeclock.c preloaded (compiled here with cc), which freezes its
wall clock at the value this test writes before each command (a case's start + the table's
ms). The sweeper runs every millisecond on that clock, so a replayed RL bucket (AT in 1970)
deleted by the wall clock while it lives on its own time line would change Smyte's answers.
Also: DEL deletes a cell, as redis-cell's users delete one.

Run one test:  tests/integration/test_peers.py Peers.test_redis_cell
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import data_path  # noqa: E402

BASE_NS = 1764000000 * 10**9  # the cases' start on the controlled clock (2025)
CASE_GAP_NS = 10**6 * 10**9  # each case starts 10^6 s after the previous one


def read_table(name):
    """[(case, clock or None, [argv], expected)] from tests/data/peers/<name>."""
    rows = []
    with open(os.path.join(harness.top_srcdir(), "tests", "data", "peers", name)) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            case, clock, cmd, expect = line.split("\t")
            rows.append((case, None if clock == "-" else float(clock), cmd.split(" "), expect))
    return rows


def read_reply(c):
    """One RESP reply on harness connection c, as the tables write it: integers space-separated,
    or "-" and an error's text."""
    head = c.readline()[:-1]
    if head.startswith(":"):
        return head[1:]
    if head.startswith("-"):
        return head
    if head.startswith("*"):
        return " ".join(read_reply(c) for _ in range(int(head[1:])))
    raise AssertionError("unexpected reply %r" % head)


class Peers(harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = cls.start_shared_daemon_on_clock(data_path("verbs.ini"), BASE_NS,
                                                 args=["--allow-client-limits", "--sweep-interval=1"])

    @classmethod
    def set_clock(cls, ns):
        cls.clock.set(ns)

    def replay(self, name):
        start = BASE_NS + CASE_GAP_NS * {"redis-cell.tsv": 1, "redis-cell-derived.tsv": 10**2,
                                     "redis-gcra.tsv": 5 * 10**2, "throttled.tsv": 6 * 10**2}.get(name, 10**3)
        # (Smyte's cases: every time is AT, in the past of this clock, but for future_at's)
        prev, n = None, 0
        with self.d.connect("tcp") as c:
            for case, clock, argv, expect in read_table(name):
                if case != prev:
                    prev, start = case, start + CASE_GAP_NS
                self.set_clock(start + int(round((clock or 0) * 10**6)))
                # the case's own keys: "<case>:<key>", as tests/core/check_client_limits.c
                c.send(harness.resp_command(argv[0], "%s:%s" % (case, argv[1]), *argv[2:]))
                reply = read_reply(c)
                self.assertEqual(reply, expect, "%s: %s %s at %s" % (name, case, " ".join(argv), clock))
                n += 1
                # let the sweeper (every ms, on the controlled clock) run between the calls
                time.sleep(0.003)
        self.assertGreater(n, 10)

    def test_redis_cell(self):
        self.replay("redis-cell.tsv")

    def test_redis_cell_derived(self):
        self.replay("redis-cell-derived.tsv")

    def test_redis_gcra(self):
        self.replay("redis-gcra.tsv")

    def test_throttled(self):
        self.replay("throttled.tsv")

    def test_smyte(self):
        self.replay("smyte.tsv")

    def test_smyte_derived(self):
        self.replay("smyte-derived.tsv")

    def test_del(self):
        # redis-cell's users delete a cell with DEL: 1 if a live cell was deleted, else 0; the
        # next CL.THROTTLE starts it afresh.
        self.set_clock(BASE_NS)
        with self.d.connect("tcp") as c:
            for argv, expect in [(("CL.THROTTLE", "del:k", "0", "1", "60"), "0 1 0 -1 60"),
                                 (("CL.THROTTLE", "del:k", "0", "1", "60"), "1 1 0 60 60"),
                                 (("DEL", "del:k"), "1"),
                                 (("DEL", "del:k"), "0"),
                                 (("CL.THROTTLE", "del:k", "0", "1", "60"), "0 1 0 -1 60"),
                                 (("DEL", "del:k", "other"),
                                  "-ERR divvyd's DEL takes one key: a CL.THROTTLE cell")]:
                c.send(harness.resp_command(*argv))
                self.assertEqual(read_reply(c), expect, argv)


if __name__ == "__main__":
    harness.main()
