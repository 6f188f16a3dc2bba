#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""How fast divvyd follows a Sentinel failover, and what the failover costs (issue #31).

    bench/sentinel-follow.py [--rounds N] [--rate HITS_PER_S] [--after SEC] [--divvyd PATH]

Each round starts a primary, a replica and three sentinels on loopback (tests/integration/
redisfix.py: down-after-milliseconds 1000, failover-timeout 3000), one divvyd with
--store=redis+sentinel://... (tests/data/redis.ini, rule type=fleet: a limit never reached,
onBackendError deny), and a client sending HITs one at a time at --rate (default 100/s) on one
counter. After 2 s the failover: either SENTINEL FAILOVER with the old primary alive ("planned")
or kill -9 of the primary ("killed"); the load goes on until --after seconds (3) after every
sentinel names the new primary.

Per round it prints:
  follow   from the first +switch-master any sentinel published (read by this script's own
           subscription to every sentinel) to the first script call the new primary executed
           (its INFO commandstats cmdstat_evalsha/cmdstat_eval, polled every 2 ms from before
           the failover: the replica executes none). Negative: divvyd moved at +promoted-slave,
           before the announcement.
  promoted the same from the first +promoted-slave (the leader's; the new primary says master).
  policy   HITs answered by onBackendError (not written) during the failover, and for how long
           (first to last such reply).
  lost     acknowledged decrements minus the decrements in the counter on the new primary.
  doubled  credits granted twice.
Then the median and the largest follow time of each kind. Exit status 0 unless a round could
not be set up; the figures are not judged here (bench/RESULTS.md holds the targets).
"""

import argparse
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402
import redisfix  # noqa: E402

LIMIT = 1000000
POLL = 0.002  # seconds between two INFO commandstats of the replica


class ScriptCalls:
    """Polls a server's INFO commandstats; records when its script calls first grew."""

    def __init__(self, server, max_seconds=60.0):
        self.server, self.first = server, None
        self._stop = threading.Event()
        self._client = server.client()
        self._base = self._calls()
        self._deadline = time.monotonic() + max_seconds
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _calls(self):
        st = self._client.info("commandstats")
        return sum(st.get(k, {}).get("calls", 0) for k in ("cmdstat_evalsha", "cmdstat_eval"))

    def _run(self):
        while not self._stop.is_set() and time.monotonic() < self._deadline and self.first is None:
            try:
                if self._calls() > self._base:
                    self.first = time.monotonic()
            except (redisfix.redis.RedisError, OSError):
                pass
            self._stop.wait(POLL)

    def stop(self):
        self._stop.set()
        self._thread.join(5)
        self._client.close()


def one_round(kind, rate, after):
    with redisfix.Sentinels() as s, redisfix.SentinelEvents(s) as ev:
        d = harness.Daemon(harness.data_path("redis.ini"),
                           args=["--store=%s" % s.url(), "--backend-timeout=200"])
        try:
            d.start()
            u = "bench-%d-%s" % (os.getpid(), kind)
            replica = s.replica if s.current_primary() is s.primary else s.primary
            calls = ScriptCalls(replica)
            load = redisfix.HitLoad(d, "HIT type=fleet u=%s" % u, rate=rate)
            try:
                time.sleep(2.0)
                t0 = time.monotonic()
                if kind == "planned":
                    s.failover(wait_old_replica=False)
                else:
                    s.provoke_failover(restart_old=False)
                time.sleep(after)
            finally:
                load.stop()
                calls.stop()
            c = s.current_primary().client()
            try:
                value = c.get("divvy:type=fleet u=*:%s:%d:3600" % (u, LIMIT))
            finally:
                c.close()
            acked, recorded, lost, doubled = redisfix.count_decrements(
                [credit for _, credit in load.acknowledged()], LIMIT, value)
            policy = [at for at, reply in load.replies
                      if at >= t0 and (harness.parse_ok(reply) or (True,))[0] is False]
            switch = ev.first("+switch-master")
            follow = (calls.first - switch) * 1000 if calls.first and switch else None
            promoted = ev.first("+promoted-slave")
            promoted = (calls.first - promoted) * 1000 if calls.first and promoted else None
            return {"follow_ms": follow, "promoted_ms": promoted, "policy": len(policy),
                    "policy_ms": (policy[-1] - policy[0]) * 1000 if policy else 0.0,
                    "acked": acked, "lost": lost, "doubled": doubled, "error": load.error}
        finally:
            d.cleanup()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rate", type=int, default=100)
    ap.add_argument("--after", type=float, default=3.0, help="seconds of load after the sentinels agree")
    ap.add_argument("--divvyd", default=None, help="the divvyd to measure (default: the build's)")
    o = ap.parse_args()
    why = redisfix.missing()
    if why:
        print("sentinel-follow: skipped: %s" % why)
        return 0
    if o.divvyd:
        os.environ["DIVVYD"] = os.path.abspath(o.divvyd)
    print("Sentinel failover, %d HIT/s on one counter, %d round(s) each" % (o.rate, o.rounds))
    print("%-8s %5s %10s %12s %8s %10s %7s %5s %7s" % ("kind", "round", "follow ms", "promoted ms", "policy",
                                                       "policy ms", "acked", "lost", "doubled"))
    summary = {}
    for kind in ("planned", "killed"):
        for i in range(o.rounds):
            r = one_round(kind, o.rate, o.after)
            f, pr = r["follow_ms"], r["promoted_ms"]
            summary.setdefault(kind, []).append(f)
            print("%-8s %5d %10s %12s %8d %10.0f %7d %5d %7d%s" % (
                kind, i + 1, "%.0f" % f if f is not None else "none", "%.0f" % pr if pr is not None else "none",
                r["policy"], r["policy_ms"], r["acked"],
                r["lost"], r["doubled"], "  (client error: %s)" % r["error"] if r["error"] else ""))
            sys.stdout.flush()
    for kind, fs in summary.items():
        got = [f for f in fs if f is not None]
        if got:
            print("%s: follow median %.0f ms, max %.0f ms (from +switch-master to the first script call on "
                  "the new primary)" % (kind, statistics.median(got), max(got)))
        else:
            print("%s: the new primary executed no script call" % kind)
    return 0


if __name__ == "__main__":
    sys.exit(main())
