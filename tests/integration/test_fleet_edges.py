#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Edges of divvyd on a Redis store (issue #16) that test_redis.py, test_redisfix.py and
tests/store/check_redis*.c leave untested, each found by a bug hunt and kept as its
regression test (real redis-server processes on loopback, tests/integration/redisfix.py):

- test_stop_with_local_fallback_in_flight: SIGTERM while a batch waits on a silent Redis
  (SIGSTOP) with --sync=always and onBackendError=local: the exit closes the Redis store,
  whose failed hits go to the local store, whose group commit completes them later; the
  fallback that receives them must still exist (it was freed first: a use-after-free, a
  SIGSEGV at exit). Every request read is answered (by the local store) and the exit is 0.

Rules: tests/data/redis.ini. Run one test:
    tests/integration/test_fleet_edges.py Shutdown.test_stop_with_local_fallback_in_flight
"""

import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import data_path, parse_ok  # noqa: E402

try:
    import redisfix  # noqa: E402
except ImportError:  # python3-redis missing
    redisfix = None

CONFIG = data_path("redis.ini")
_n = [0]


def uid(prefix="u"):
    _n[0] += 1
    return "%s-%d-%d" % (prefix, os.getpid(), _n[0])


def missing():
    return redisfix is None or redisfix.missing()


@unittest.skipIf(missing(), "redis-server/redis-sentinel or python3-redis missing")
class Shutdown(harness.DaemonTestCase):
    def test_stop_with_local_fallback_in_flight(self):
        with redisfix.RedisServer() as redis:
            # The batch's deadline is far beyond the stop: only the exit ends it.
            d = self.start_daemon(CONFIG, args=["--store=%s" % redis.url(), "--backend-timeout=60000",
                                                "--sync=always"])
            u = uid()
            self.assertHit(d.request("HIT type=local u=%s" % u), True, 1, (59, 60))  # connected
            redis.pause()
            try:
                with d.connect("unix") as c:
                    c.send("HIT type=local u=%s\n" % u * 3)
                    # the three requests were read (the kernel's queue toward the daemon is
                    # empty): their batch waits on Redis; a second SIGTERM exits at once
                    redisfix.wait_until(lambda: harness.unix_peer_unread(c.sock) == 0, harness.IO_TIMEOUT,
                                        "the daemon reading the requests")
                    d.signal(signal.SIGTERM)
                    redisfix.wait_until(lambda: "Received SIGTERM" in d.log_text(), harness.IO_TIMEOUT,
                                        "the first SIGTERM taken")  # else the two may merge
                    d.signal(signal.SIGTERM)
                    rc = d.wait_exit()
                    replies = c.read_until_eof()
            finally:
                redis.resume()
            self.assertEqual(rc, 0, d.log_tail())
            # the local store decided them (2 per 60 s: one was taken above, in Redis)
            self.assertEqual([parse_ok(x)[:2] if parse_ok(x) else x for x in replies],
                             [(True, 1), (True, 0), (False, 0)], d.log_tail())


if __name__ == "__main__":
    harness.main()
