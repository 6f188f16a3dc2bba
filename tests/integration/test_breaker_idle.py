#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The Redis store's circuit breaker on an idle daemon (issue #16 follow-up), against a real
redis-server on loopback (tests/integration/redisfix.py).

- test_breaker_closes_without_requests: Redis is killed under a few requests (answered by
  their policy, the breaker opens: STATUS says breaker-open), then started again and no
  request comes. The breaker stayed open until the next request became its probe, so an idle
  daemon said "breaker-open" (STATUS, log, divvyd_backend_up 0) long after Redis was back.
  Now the store probes on its own (PING) once the open period is over: the store is up again
  (metrics, log, STATUS) with no request, and no script call reached the new Redis before.
- test_cluster_node_back_without_requests: a Redis Cluster node killed under requests for its
  slots (the breaker opens, its probe is answered by the other nodes: the store is "down"),
  then started again, and no request comes. Nothing reconnected a cluster node but a call
  routed to it (a single server is reconnected on its own), so an idle daemon said "down"
  (STATUS, divvyd_backend_up 0) for ever. Now a cluster node lost to a failure is reconnected
  with the same backoff: the store is up again with no request.
- test_cluster_node_down_does_not_open_breaker_on_the_others: one cluster node of three
  down, and every batch carries a hit for it (as every batch under load does). Each batch
  counted as failed, so the breaker opened after 5 and refused the hits of the nodes that
  answer too (395 of 400 such hits decided by policy in a measure): a third of the cluster
  down made all of it down. A batch a server answered is no failure of the store now.
- test_cluster_node_removed_while_down: a cluster node dies for good and its slots go to
  another node (what a failover or redis-cli --cluster del-node does). Every slot was served
  again, yet the dead node, still in the store's list, made it "down" for ever. Only nodes
  that serve a slot in the current map count (and are reconnected and probed). And the log's
  "is up (ADDRESS)" named the dead node (the last a call went to): now a node that answers.

Rules: tests/data/redis.ini. Run one test:
    tests/integration/test_breaker_idle.py BreakerIdle.test_breaker_closes_without_requests
"""

import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import parse_ok  # noqa: E402

try:
    import redisfix  # noqa: E402
except ImportError:  # python3-redis missing
    redisfix = None

CONFIG = harness.data_path("redis.ini")
BACKOFF_MAX = 5.0  # seconds: the store's longest open period (REDIS_STORE_BACKOFF_MAX_DEFAULT_USEC)
RECOVERY_TIMEOUT = 10 * BACKOFF_MAX * harness.TIMEOUT_SCALE  # a bound, never reached when it works
BREAKER_THRESHOLD = 5  # failed batches in a row that open it (REDIS_STORE_BREAKER_THRESHOLD_DEFAULT)


class BreakerCase(harness.DaemonTestCase):
    def backend(self, port):
        """The metrics endpoint's samples (divvyd_backend_up and the fallback counters)."""
        return harness.prometheus_samples(harness.http_get(port)[2])

    def wait_up_without_requests(self, d, http):
        """Waits (bounded by RECOVERY_TIMEOUT) until divvyd_backend_up is 1, sending no request;
        drains the daemon's notes meanwhile, so that sd_notify() never blocks on a full queue."""
        def up():
            d.drain_notes(0)
            return self.backend(http).get("divvyd_backend_up") == 1

        redisfix.wait_until(up, RECOVERY_TIMEOUT, "divvyd_backend_up 1 with no request", d.log_tail)


def missing():
    return redisfix is None or redisfix.missing()


@unittest.skipIf(missing(), "redis-server/redis-sentinel or python3-redis missing")
class BreakerIdle(BreakerCase):
    def test_breaker_closes_without_requests(self):
        with redisfix.RedisServer() as redis:
            http = harness.free_tcp_port()
            d = self.start_daemon(CONFIG, args=["--store=%s" % redis.url(), "--backend-timeout=200",
                                                "--http-port=%d" % http])
            u = "idle-%d" % os.getpid()
            self.assertHit(d.request("HIT type=allow u=%s" % u), True, 1, (59, 60))  # in Redis
            redisfix.wait_until(lambda: self.backend(http).get("divvyd_backend_up") == 1, harness.IO_TIMEOUT,
                                "divvyd_backend_up 1", d.log_tail)

            # Down: each request, a batch of its own, answered by its policy (allow: the
            # limit's credit) until the breaker opens and after.
            redis.kill()
            killed = d.last_seq()
            for _ in range(2 * BREAKER_THRESHOLD):
                self.assertEqual(d.request("HIT type=allow u=%s" % u), "OK true 2 60")
            self.assertEqual(self.backend(http).get("divvyd_backend_up"), 0)  # published at once
            redisfix.wait_until(  # the counters with each sweep (every second)
                lambda: self.backend(http).get('divvyd_backend_fallbacks_total{policy="allow"}') ==
                2 * BREAKER_THRESHOLD, harness.IO_TIMEOUT, "%d fallbacks counted" % (2 * BREAKER_THRESHOLD),
                d.log_tail)
            d.wait_note(re.compile(r"^STATUS=Serving .*, redis breaker-open \("),
                        after=killed, what="STATUS saying breaker-open")

            # Back, and no request from now on: the store finds out by itself.
            redis.start()
            back = d.last_seq()

            self.wait_up_without_requests(d, http)
            self.assertEqual(len(re.findall(r"Store redis://\S+ is up \(127\.0\.0\.1:%d\)" % redis.port,
                                            d.log_text())), 2, d.log_tail())
            d.wait_note(re.compile(r"^STATUS=Serving .*, redis 127\.0\.0\.1:%d up, %d fallbacks$" %
                                   (redis.port, 2 * BREAKER_THRESHOLD)), after=back,
                        what="STATUS saying up")
            # Not a request in disguise: no script call reached the new server yet.
            stats = redis.client().info("commandstats")
            self.assertFalse([k for k in stats if k in ("cmdstat_evalsha", "cmdstat_eval")], stats)

            # And the next request is counted in Redis (a new, empty server), not refused.
            self.assertHit(d.request("HIT type=allow u=%s" % u), True, 1, (59, 60))
            self.assertIn("cmdstat_evalsha", redis.client().info("commandstats"))



@unittest.skipIf(missing(), "redis-server/redis-sentinel or python3-redis missing")
class ClusterBreakerIdle(BreakerCase):
    def actor_on(self, cl, node):
        return next(x for x in ("cb-%d-%d" % (os.getpid(), i) for i in range(10000))
                    if cl.node_for_key("{%s}" % x) is node)

    def start_on(self, cl):
        """divvyd on cluster cl with metrics, one actor per node (in node order), each node's
        connection open and the store up. Returns (daemon, http port, actors)."""
        http = harness.free_tcp_port()
        d = self.start_daemon(CONFIG, args=["--store=%s" % cl.url(), "--backend-timeout=200",
                                            "--http-port=%d" % http])
        actors = [self.actor_on(cl, n) for n in cl.nodes]
        for a in actors:
            self.assertHit(d.request("HIT type=allow u=%s" % a), True, 1, (59, 60))
        redisfix.wait_until(lambda: self.backend(http).get("divvyd_backend_up") == 1, harness.IO_TIMEOUT,
                            "divvyd_backend_up 1", d.log_tail)
        return d, http, actors

    def test_cluster_node_back_without_requests(self):
        with redisfix.Cluster() as cl:
            d, http, actors = self.start_on(cl)

            victim = cl.nodes[1]
            victim.kill()
            for _ in range(2 * BREAKER_THRESHOLD):
                self.assertEqual(d.request("HIT type=allow u=%s" % actors[1]), "OK true 2 60")
            self.assertEqual(self.backend(http).get("divvyd_backend_up"), 0)
            killed = d.last_seq()
            d.wait_note(re.compile(r"^STATUS=Serving .*, redis down \("), after=killed,
                        what="STATUS saying down (the probe answered by the other nodes)")

            victim.start()
            cl.wait_ok()

            self.wait_up_without_requests(d, http)
            self.assertHit(d.request("HIT type=allow u=%s" % actors[1]), True, 1, (59, 60))

    def test_cluster_node_removed_while_down(self):
        with redisfix.Cluster() as cl:
            d, http, actors = self.start_on(cl)

            # The node dies for good; its slots go to another (what a failover or del-node does).
            victim, heir, other = cl.nodes[2], cl.nodes[0], cl.nodes[1]
            ranges = [r for r, port in cl.slots().items() if port == victim.port]
            victim_id = cl.node_id(victim)
            victim.kill()
            self.assertEqual(d.request("HIT type=allow u=%s" % actors[2]), "OK true 2 60")
            killed = d.last_seq()
            d.wait_note(re.compile(r"^STATUS=Serving .*, redis down \("), after=killed, what="STATUS saying down")
            for n in (heir, other):
                cl._ask(n, "CLUSTER FORGET", victim_id)
            for start, end in ranges:
                cl._ask(heir, "CLUSTER ADDSLOTSRANGE", start, end)
            cl.wait_ok()

            # Every slot is served again: the store is up with no request, and the actor's next
            # hit is counted on its new node (an empty counter there).
            self.wait_up_without_requests(d, http)
            self.assertHit(d.request("HIT type=allow u=%s" % actors[2]), True, 1, (59, 60))
            self.assertEqual(cl.node_for_key("{%s}" % actors[2]), heir)
            # the address it names is one that answers, not the dead node's
            up_lines = re.findall(r"Store redis\+cluster://\S+ is up \((\S+)\)", d.log_text())
            self.assertEqual(len(up_lines), 2, d.log_tail())
            self.assertNotEqual(up_lines[-1], victim.address, d.log_tail())

    def test_cluster_node_down_does_not_open_breaker_on_the_others(self):
        with redisfix.Cluster() as cl:
            d = self.start_daemon(CONFIG, args=["--store=%s" % cl.url(), "--backend-timeout=200"])
            actors = {n.port: [] for n in cl.nodes}
            for i in range(5000):  # bounded
                a = "nd-%d-%d" % (os.getpid(), i)
                actors[cl.node_for_key("{%s}" % a).port].append(a)
            for n in cl.nodes:  # every node's connection is open
                self.assertHit(d.request("HIT type=deny u=%s" % actors[n.port][0]), True, 1, (59, 60))
            victim = cl.nodes[2]
            victim.kill()
            dead = actors[victim.port]
            healthy = actors[cl.nodes[0].port][1:] + actors[cl.nodes[1].port][1:]
            rounds = 6 * BREAKER_THRESHOLD
            with d.connect("unix") as c:
                for i in range(rounds):
                    # one batch (one write) with a hit for the dead node and one for a live one
                    c.send("HIT type=deny u=%s\nHIT type=deny u=%s\n" % (dead[i], healthy[i]))
                    self.assertEqual(parse_ok(c.readline())[:2], (False, 0))  # deny: its policy
                    # counted in Redis (a new actor: 1 left of 2), not refused by the breaker
                    self.assertEqual(parse_ok(c.readline())[:2], (True, 1), d.log_tail())


@unittest.skipIf(missing(), "redis-server/redis-sentinel or python3-redis missing")
class SentinelBreakerIdle(BreakerCase):
    def test_failover_during_outage_without_requests(self):
        with redisfix.Sentinels() as sg:
            http = harness.free_tcp_port()
            d = self.start_daemon(CONFIG, args=["--store=%s" % sg.url(), "--backend-timeout=200",
                                                "--http-port=%d" % http])
            u = "sf-%d" % os.getpid()
            self.assertHit(d.request("HIT type=allow u=%s" % u), True, 1, (59, 60))
            redisfix.wait_until(lambda: self.backend(http).get("divvyd_backend_up") == 1, harness.IO_TIMEOUT,
                                "divvyd_backend_up 1", d.log_tail)
            old = sg.primary_address()
            old_srv = sg.server_at(old)
            old_srv.kill()
            for _ in range(2 * BREAKER_THRESHOLD):
                self.assertEqual(d.request("HIT type=allow u=%s" % u)[:8], "OK true ")
            self.assertEqual(self.backend(http).get("divvyd_backend_up"), 0)
            new = sg.wait_primary(old)

            self.wait_up_without_requests(d, http)
            d.wait_note(re.compile(r"^STATUS=Serving .*, redis 127\.0\.0\.1:%d up, " % new[1]),
                        after=0, what="STATUS naming the new primary")
            self.assertTrue(d.request("HIT type=allow u=%s" % u).startswith("OK true "))


if __name__ == "__main__":
    harness.main()
