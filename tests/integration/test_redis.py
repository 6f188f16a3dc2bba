#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""divvyd on a Redis/Valkey store (issue #16), against real redis-server and redis-sentinel
processes on loopback (tests/integration/redisfix.py): divvy 1.7's keys byte for byte, a
fleet of two daemons sharing counters, every algorithm, SCRIPT FLUSH, Redis killed under load
and brought back, the onBackendError policies, passwords, a Unix socket, a Sentinel failover
and a Redis Cluster slot migrated while hits flow. Rules: tests/data/redis.ini.

Regression tests of bugs found on the Redis store, by test:

- test_stop_with_local_fallback_in_flight: SIGTERM while a batch waits on a silent Redis
  (SIGSTOP) with --sync=always and onBackendError=local: the exit closes the Redis store,
  whose failed hits go to the local store, whose group commit completes them later; the
  fallback that receives them must still exist (it was freed first: a use-after-free, a
  SIGSEGV at exit). Every request read is answered (by the local store) and the exit is 0.
- test_reload_waits_for_no_new_batch: SIGHUP while a batch waits on Redis. The reload
  waited for a moment with no batch in flight, and the batches kept starting meanwhile; under
  a steady load on a Redis some round trip away (20 ms: found with a delaying proxy and 24
  pipelining clients) there is a batch in flight at every moment, so the new rules never
  came. Now no new batch starts until the reload is done: a request read after the SIGHUP is
  decided by the new rules.
- test_cluster_first_use_of_a_node_is_not_an_outage: the first call to each cluster node
  opens its connection; while it connected the store called itself "connecting": the log
  warned "is connecting, hits are decided by onBackendError: no reply yet" and
  divvyd_backend_up fell to 0 at every start, though no hit was decided by a policy. A node's
  first connection no longer counts as the store's; a reconnect after a failure still does.
  (And the first "is up" named no address: "is up ()".)
- test_cluster_of_more_than_64_nodes: the daemon watched at most 64 sockets of the store, so
  in a cluster of more primaries (a fake one here, FakeCluster: 70 ports of one thread) every
  node past the 64th failed to connect ("Too many open files"), its hits were decided by their
  policy for ever and the breaker opened. The daemon now watches as many sockets as the store
  has.
- test_loading_server_is_not_up: a Redis restarted and still reading its dataset answers
  every command -LOADING; its SCRIPT LOAD's error reply made the connection healthy, so the
  log said "is up" and divvyd_backend_up was 1 while every hit was decided by its policy. A
  LOADING reply to SCRIPT LOAD now closes the connection (retried with the backoff), STATUS
  says why, and the store is up once the server has loaded.
- test_chain_split_by_a_migration_waits_for_it: a chain of two counters in one slot whose keys a
  live migration has split (one moved, one not) gets TRYAGAIN. It was retried 3 x 5 ms and then
  decided by policy; it is now retried until the batch's deadline (--backend-timeout) and
  counted in Redis once the migration is over.
- test_key_order_is_node_divvys: Node divvy names a counter by its rule's keys in JavaScript's
  order (UTF-16 code units), divvyd sorted bytes: for [😀=2 ！=x] each wrote its own key and
  3 + 3 hits passed a limit of 5. divvyd now builds divvy's keys in Node's order.
- test_keys_that_can_meet_are_warned_of: divvy's key format escapes nothing, so with [path=/x]
  and [path=/x:y] at equal limits the actor "y:alice" of one and "alice" of the other count in
  one key, where the local store keeps them apart. The format stays (Node divvy reads it);
  --check-config (with or without --compat=divvy) now warns of every such pair.
- test_compat_accepts_on_backend_error: --check-config --compat=divvy refused every rule with
  onBackendError, which Node divvy ignores and which decides only hits Redis does not answer
  (Node divvy answers those with an error): a shared config with per-rule policies could not
  pass. It is accepted now.
- test_clusterdown_is_a_server_error: an error reply (CLUSTERDOWN for a slot nobody serves) was
  counted as divvyd_backend_errors_total{kind="protocol"}; it is kind="server".

Run one test:  tests/integration/test_redis.py Standalone.test_fleet
"""

import hashlib
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import data_path, parse_ok  # noqa: E402

try:
    import redisfix  # noqa: E402
except ImportError as e:  # python3-redis missing
    redisfix = None
    IMPORT_ERROR = str(e)

CONFIG = data_path("redis.ini")
_n = [0]


def uid(prefix="u"):
    _n[0] += 1
    return "%s-%d-%d" % (prefix, os.getpid(), _n[0])


# What Node divvy 1.7 does for a HIT, as its README and the issue describe it (GET; missing:
# SETEX key resetSeconds creditLimit-1; positive: DECR; else denied; reply TTL): our own
# reference, written from that description, to compare divvyd's keys with.
DIVVY_REFERENCE = """
local v = redis.call('GET', KEYS[1])
local allowed, left
if not v then
  redis.call('SETEX', KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))
  allowed, left = 1, tonumber(ARGV[2])
elseif tonumber(v) > 0 then
  allowed, left = 1, redis.call('DECR', KEYS[1])
else
  allowed, left = 0, 0
end
return {allowed, left, redis.call('TTL', KEYS[1])}
"""


def divvy_key(ops, actor, limit, reset):
    return "divvy:%s:%s:%d:%d" % (" ".join("%s=%s" % kv for kv in sorted(ops.items())), actor, limit, reset)


def store_args(url, *extra):
    return ["--store=%s" % url, "--backend-timeout=200"] + list(extra)


@unittest.skipIf(redisfix is None or (redisfix and redisfix.missing()),
                 "redis-server/redis-sentinel or python3-redis missing")
class Standalone(harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        cls.redis = redisfix.RedisServer(unix=True).start()
        cls.addClassCleanup(cls.redis.cleanup)
        cls.r = cls.redis.client()
        cls.addClassCleanup(cls.r.close)

    def daemon(self, *extra, url=None):
        return self.start_daemon(CONFIG, args=store_args(url or self.redis.url(), *extra))

    def test_compat_key_byte_for_byte(self):
        d = self.daemon()
        ip = uid("ip")
        key = divvy_key({"method": "GET", "path": "/v1/*"}, ip, 3, 60)
        self.assertHit(d.request("HIT method=GET path=/v1/users ip=%s" % ip), True, 2, (59, 60))
        self.assertEqual(self.r.get(key), b"2")
        self.assertTrue(58 <= self.r.ttl(key) <= 60, self.r.ttl(key))
        # The same hit by the reference on a twin key: the same value and encoding.
        twin = divvy_key({"method": "GET", "path": "/v1/*"}, ip + "-twin", 3, 60)
        self.assertEqual(self.r.eval(DIVVY_REFERENCE, 1, twin, 60, 2)[:2], [1, 2])
        self.assertEqual(self.r.get(twin), self.r.get(key))
        self.assertEqual(self.r.object("encoding", twin), self.r.object("encoding", key))
        self.assertEqual(self.r.type(key), b"string")
        # Nothing else was written for this hit: the one key.
        self.assertEqual(sorted(self.r.keys("divvy:*%s:*" % ip)), [key.encode()])
        self.assertHit(d.request("HIT method=GET path=/v1/x ip=%s" % ip), True, 1, (58, 60))
        self.assertHit(d.request("HIT method=GET path=/v1/x ip=%s" % ip), True, 0, (58, 60))
        self.assertHit(d.request("HIT method=GET path=/v1/x ip=%s" % ip), False, 0, (58, 60))
        self.assertEqual(self.r.get(key), b"0")

    def test_continues_a_counter_node_divvy_made(self):
        d = self.daemon()
        ip = uid("ip")
        key = divvy_key({"method": "GET", "path": "/v1/*"}, ip, 3, 60)
        # Node divvy answered two hits (3 -> 2 -> 1) in a window opened 30 s ago.
        self.r.eval(DIVVY_REFERENCE, 1, key, 60, 2)
        self.r.eval(DIVVY_REFERENCE, 1, key, 60, 2)
        self.r.expire(key, 30)
        self.assertHit(d.request("HIT method=GET path=/v1/a ip=%s" % ip), True, 0, (29, 30))
        self.assertHit(d.request("HIT method=GET path=/v1/a ip=%s" % ip), False, 0, (29, 30))
        # ... and Node divvy sees what divvyd did.
        self.assertEqual(self.r.eval(DIVVY_REFERENCE, 1, key, 60, 2)[:2], [0, 0])

    def test_fleet(self):
        a, b = self.daemon(), self.daemon()
        u = uid()
        replies = [d.request("HIT type=deny u=%s" % u) for d in (a, b, a)]
        self.assertEqual([parse_ok(x)[:2] for x in replies], [(True, 1), (True, 0), (False, 0)])
        for alg in ("tb", "sw"):
            u = uid()
            got = [parse_ok(d.request("HIT type=%s u=%s" % (alg, u)))[:2] for d in (a, b, a, b)]
            self.assertEqual(got, [(True, 2), (True, 1), (True, 0), (False, 0)], alg)
            keys = self.r.keys("divvyd:{%s}:*" % u)
            self.assertEqual(len(keys), 1, keys)
            self.assertTrue(0 < self.r.pttl(keys[0]) <= 2 * 3600 * 1000 + 1)  # sliding: 2 windows

    def test_verbs_and_chain(self):
        d = self.daemon()
        u, c = uid(), uid("c")
        f = lambda line: d.request(line)  # noqa: E731
        self.assertTrue(f("TAKE 2 type=tb u=%s" % u).startswith("OK allowed=true credit=1 "))
        self.assertTrue(f("PEEK 2 type=tb u=%s" % u).startswith("OK allowed=false credit=1 "))
        self.assertTrue(f("CHARGE 1 type=tb u=%s" % u).startswith("OK allowed=true credit=0 "))
        # chain: 2 per user (continue) and 3 per chain value; all or nothing
        u2 = uid()
        self.assertHit(f("HIT chain=%s u=%s" % (c, u)), True, 1, (3599, 3600))
        self.assertHit(f("HIT chain=%s u=%s" % (c, u)), True, 0, (3599, 3600))
        self.assertHit(f("HIT chain=%s u=%s" % (c, u)), False, 0, (3599, 3600))
        self.assertHit(f("HIT chain=%s u=%s" % (c, u2)), True, 0, (3599, 3600))
        self.assertHit(f("HIT chain=%s u=%s" % (c, u2)), False, 0, (3599, 3600))
        # the denied hits charged nothing: u2's own counter still has 1
        self.assertEqual(self.r.get(divvy_key({"chain": "*", "u": "*"}, u2, 2, 3600)), b"1")

    def test_aligned_window_and_actor_of_two_fields(self):
        # issue #34 in a fleet: the script opens the aligned window (its end a multiple of the
        # hour on Redis's clock) and keeps one counter per (ip, u), in divvyd's own keys
        a, b = self.daemon(), self.daemon()
        u = uid()
        t0 = time.time()
        got = [parse_ok(d.request("HIT type=aligned u=%s" % u)) for d in (a, b, a)]
        t1 = time.time()
        self.assertEqual([g[:2] for g in got], [(True, 1), (True, 0), (False, 0)])
        keys = self.r.keys("divvyd:{%s}:*" % u)
        self.assertEqual(len(keys), 1, keys)
        tag, w0, credit = self.r.get(keys[0]).decode().split(":")
        self.assertEqual((tag, credit), ("0", "0"))
        self.assertEqual(int(w0) % (3600 * 10**6), 0, w0)  # first-hit: a multiple 1 time in 3.6e9
        end = int(w0) / 1e6
        self.assertTrue(t0 < end <= t1 + 3600, (t0, end))
        for g in got:  # reset: to the window's end, not 3600 from the hit
            self.assertTrue(int(end - t1) <= g[2] <= int(end - t0) + 1, (g, end - t0))
        self.assertEqual(self.r.keys("divvy:*type=aligned*"), [])

        ip = uid("ip")
        hit = lambda d, rest: parse_ok(d.request("HIT type=combo " + rest))[:2]  # noqa: E731
        self.assertEqual(hit(a, "ip=%s,b u=c" % ip), (True, 0))
        self.assertEqual(hit(b, "u=c ip=%s,b" % ip), (False, 0))  # the same counter, in Redis
        self.assertEqual(hit(b, "ip=%s u=b,c" % ip), (True, 0))  # not the same as the above
        self.assertEqual(hit(a, "ip=%s" % ip), (True, 0))  # u absent: empty
        self.assertEqual(hit(b, "ip=%s u=" % ip), (False, 0))
        n = len(ip)
        self.assertEqual(sorted(k.decode().rsplit(":", 1)[0] for k in self.r.keys("divvyd:{*%s*}:*" % ip)),
                         sorted(["divvyd:{%d:%s,b,1:c,}" % (n + 2, ip), "divvyd:{%d:%s,3:b,c,}" % (n, ip),
                                 "divvyd:{%d:%s,0:,}" % (n, ip)]))
        self.assertEqual(self.r.keys("divvy:*type=combo*"), [])

    def test_script_flush_is_invisible(self):
        d = self.daemon()
        u = uid()
        with d.connect() as c:
            self.assertHit(c.request("HIT type=deny u=%s" % u), True, 1, (59, 60))
            self.r.script_flush()
            replies = c.pipeline(["HIT type=deny u=%s" % u, "HIT type=tb u=%s" % u, "HIT type=deny u=%s" % u])
        self.assertHit(replies[0], True, 0, (58, 60))
        self.assertTrue(replies[1].startswith("OK true 2 "), replies[1])
        self.assertHit(replies[2], False, 0, (58, 60))

    def test_unix_socket_and_db(self):
        d = self.daemon(url="redis+unix://%s?db=3" % self.redis.unix_path)
        u = uid()
        self.assertHit(d.request("HIT type=deny u=%s" % u), True, 1, (59, 60))
        r3 = self.redis.client(db=3)
        self.addCleanup(r3.close)
        self.assertEqual(r3.get(divvy_key({"type": "deny", "u": "*"}, u, 2, 60)), b"1")
        self.assertIsNone(self.r.get(divvy_key({"type": "deny", "u": "*"}, u, 2, 60)))

    def test_resp_on_redis(self):
        # issue #17 over issue #16: a Redis client asks divvyd, whose counters are in Redis. The
        # peers' commands (issue #33: redis-cell's and Smyte's 64-bit arithmetic, not Redis's
        # Lua) need the local store: refused at start.
        bad = self.new_daemon(CONFIG, args=store_args(self.redis.url(), "--allow-client-limits"))
        bad.start(wait_ready=False)
        self.assertNotEqual(bad.wait_exit(), 0)
        self.assertIn("--allow-client-limits needs the local store", bad.log_text())
        d = self.daemon()
        c = redisfix.redis.Redis(host="127.0.0.1", port=d.port, socket_timeout=harness.IO_TIMEOUT)
        self.addCleanup(c.close)
        u = uid()
        self.assertEqual(c.execute_command("HIT", "type", "deny", "u", u)[:2], [1, 1])
        self.assertEqual(self.r.get(divvy_key({"type": "deny", "u": "*"}, u, 2, 60)), b"1")

    def test_metrics_and_status(self):
        port = harness.free_tcp_port()
        d = self.daemon("--http-port=%d" % port)
        d.request("HIT type=deny u=%s" % uid())
        deadline = time.monotonic() + 10
        while True:
            m = harness.prometheus_samples(harness.http_get(port)[2])
            # the state is published at once, the counters with each sweep (every second)
            if (m.get("divvyd_backend_up") == 1 and m.get("divvyd_backend_round_trip_seconds_count", 0) >= 1) \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(m.get("divvyd_backend_up"), 1)
        self.assertGreaterEqual(m.get("divvyd_backend_round_trip_seconds_count", 0), 1)
        self.assertEqual(m.get('divvyd_backend_fallbacks_total{policy="deny"}'), 0)
        d.wait_note(re.compile(r"STATUS=Serving .*, redis 127\.0\.0\.1:%d up, 0 fallbacks" % self.redis.port),
                    what="STATUS naming the Redis store")


@unittest.skipIf(redisfix is None or (redisfix and redisfix.missing()),
                 "redis-server/redis-sentinel or python3-redis missing")
class Failures(harness.DaemonTestCase):
    def test_down_policies_and_recovery(self):
        with redisfix.RedisServer() as redis:
            d = self.start_daemon(CONFIG, args=store_args(redis.url(), "--backend-timeout=50"))
            u = uid()
            self.assertHit(d.request("HIT type=deny u=%s" % u), True, 1, (59, 60))
            redis.kill()
            # Every request answered with an OK line, by its rule's policy, in order.
            lines = []
            for i in range(40):
                lines += ["HIT type=deny u=%s" % u, "HIT type=allow u=%s" % u, "HIT type=local u=%s" % u]
            t0 = time.monotonic()
            with d.connect() as c:
                replies = c.pipeline(lines)
            self.assertLess(time.monotonic() - t0, 30)
            self.assertEqual(len(replies), len(lines))
            for i in range(0, len(lines), 3):
                self.assertEqual(replies[i], "OK false 0 60", i)
                self.assertEqual(replies[i + 1], "OK true 2 60", i)
            # local: this host's store counts (2 per 60 s), then denies
            local = [parse_ok(x)[:2] for x in replies[2::3]]
            self.assertEqual(local[:3], [(True, 1), (True, 0), (False, 0)])
            self.assertTrue(all(x == (False, 0) for x in local[2:]))
            # The state change is logged once, not per request.
            time.sleep(0.5)
            self.assertEqual(len(re.findall(r"is (down|connecting|breaker-open)", d.log_text())), 1, d.log_tail())
            # Back: counting in Redis again (a new, empty server), without a restart.
            redis.start()
            deadline = time.monotonic() + 20
            v = None
            u2 = uid()
            while time.monotonic() < deadline:
                d.request("HIT type=deny u=%s" % u2)
                v = redis.client().get(divvy_key({"type": "deny", "u": "*"}, u2, 2, 60))
                if v is not None:
                    break
                time.sleep(0.05)
            self.assertIsNotNone(v, d.log_tail())
            self.assertIn("is up", d.log_text())

    def test_slow_redis_times_out(self):
        with redisfix.RedisServer() as redis:
            d = self.start_daemon(CONFIG, args=store_args(redis.url(), "--backend-timeout=50"))
            u = uid()
            self.assertHit(d.request("HIT type=allow u=%s" % u), True, 1, (59, 60))
            redis.pause()  # SIGSTOP: connected, silent
            try:
                t0 = time.monotonic()
                self.assertEqual(d.request("HIT type=deny u=%s" % u), "OK false 0 60")
                self.assertLess(time.monotonic() - t0, 5)
            finally:
                redis.resume()

    def test_input_while_in_flight(self):
        # A batch waits in the store (Redis paused) while its connection sends more, or closes
        # its side: the daemon must read that input once the batch completes (server.c holds
        # the epoll event that arrived meanwhile), with nothing lost or left unread.
        with redisfix.RedisServer() as redis:
            d = self.start_daemon(CONFIG, args=store_args(redis.url(), "--backend-timeout=5000"))
            u, v = uid(), uid()
            self.assertHit(d.request("HIT type=deny u=%s" % u), True, 1, (59, 60))  # connected
            with d.connect() as more, d.connect() as closing:
                redis.pause()
                try:
                    more.send("HIT type=deny u=%s\n" % u)
                    closing.send("HIT type=deny u=%s\n" % v)
                    time.sleep(0.3)  # both batches now wait for Redis
                    more.send("HIT type=deny u=%s\n" % u)
                    closing.shutdown_write()
                    time.sleep(0.3)
                finally:
                    redis.resume()
                self.assertHit(more.readline(), True, 0, (59, 60))
                self.assertHit(more.readline(), False, 0, (59, 60))  # read after the batch
                self.assertHit(closing.readline(), True, 1, (59, 60))
                self.assertTrue(closing.at_eof(), "the daemon did not see the peer's EOF")
            self.assertEqual(self.redis_value(redis, u), "0")

    def redis_value(self, redis, actor):
        v = redis.client().get(divvy_key({"type": "deny", "u": "*"}, actor, 2, 60))
        return v.decode() if isinstance(v, bytes) else v

    def test_password(self):
        with redisfix.RedisServer(password="s3cret") as redis:
            pwfile = os.path.join(redis.dir, "pw")
            with open(pwfile, "w") as f:
                f.write("s3cret\n")
            url = "redis://127.0.0.1:%d" % redis.port
            d = self.start_daemon(CONFIG, args=store_args(url, "--store-password-file=%s" % pwfile))
            u = uid()
            self.assertHit(d.request("HIT type=deny u=%s" % u), True, 1, (59, 60))
            self.assertEqual(redis.client().get(divvy_key({"type": "deny", "u": "*"}, u, 2, 60)), b"1")
            e = self.start_daemon(CONFIG, args=store_args(url), env={"DIVVYD_STORE_PASSWORD": "s3cret"})
            self.assertHit(e.request("HIT type=deny u=%s" % u), True, 0, (58, 60))
            # a wrong password: every hit by its policy, never an ERR
            w = self.start_daemon(CONFIG, args=store_args(url), env={"DIVVYD_STORE_PASSWORD": "wrong"})
            self.assertEqual(w.request("HIT type=deny u=%s" % uid()), "OK false 0 60")
            self.assertEqual(w.request("HIT type=allow u=%s" % uid()), "OK true 2 60")


@unittest.skipIf(redisfix is None or (redisfix and redisfix.missing()),
                 "redis-server/redis-sentinel or python3-redis missing")
class Sentinel(harness.DaemonTestCase):
    """A failover counted: HITs at 100/s on one counter (type=fleet: a limit never reached,
    onBackendError deny, so an allowed reply is a decrement Redis acknowledged and a denied one the
    policy's answer while the primary moves), then the acknowledged decrements against the
    counter on the new primary. The follow times are measured by bench/sentinel-follow.py."""

    LIMIT = 1000000

    def fleet_key(self, u):
        return divvy_key({"type": "fleet", "u": "*"}, u, self.LIMIT, 3600)

    def count(self, s, u, *loads):
        c = s.current_primary().client()
        try:
            value = c.get(self.fleet_key(u))
        finally:
            c.close()
        self.assertIsNotNone(value)
        credits = [credit for load in loads for _, credit in load.acknowledged()]
        return redisfix.count_decrements(credits, self.LIMIT, value)

    def wait_hits(self, load, n):
        redisfix.wait_until(lambda: load.count() >= n, 30, "%d replies to the load" % n)

    def hit_until(self, d, line, allowed, what):
        """Sends line until a reply's allowed is `allowed` (bounded); returns the replies."""
        replies = []

        def got():
            replies.append(d.request(line))
            return parse_ok(replies[-1])[0] == allowed

        redisfix.wait_until(got, 20, what, d.log_tail)
        return replies

    def test_hold_abort_switch_and_demoted(self):
        # A sentinel of the test's own publishes a failover's events on cue, over two unrelated
        # primaries: what the store does at each event, counted on both.
        with redisfix.RedisServer() as p1, redisfix.RedisServer() as p2, \
                redisfix.FakeSentinel("divvyd", (p1.host, p1.port)) as fs:
            d = self.start_daemon(CONFIG, args=store_args("redis+sentinel://%s/divvyd" % fs.address))
            u = uid()
            line = "HIT type=fleet u=%s" % u
            key = self.fleet_key(u)

            def value(srv):
                c = srv.client()
                try:
                    v = c.get(key)
                finally:
                    c.close()
                return int(v) if v is not None else None

            self.assertHit(d.request(line), True, self.LIMIT - 1, 3600)
            redisfix.wait_until(lambda: fs.subscribers(7) == 1, 20, "divvyd subscribed to the failover events",
                                d.log_tail)
            old = "master divvyd 127.0.0.1 %d" % p1.port
            # A failover of p1 starts: nothing more is written there; hits by policy (deny).
            fs.publish("+try-failover", old)
            before = self.hit_until(d, line, False, "a hit answered by policy")
            held = value(p1)
            self.assertEqual(held, self.LIMIT - 1 - sum(1 for r in before if parse_ok(r)[0]))
            for _ in range(20):
                self.assertEqual(d.request(line), "OK false 0 3600")
            self.assertEqual(value(p1), held)
            d.wait_note(re.compile(r"^STATUS=Serving .*, redis failing-over \("), what="STATUS saying failing-over")
            # Aborted: p1 counts again.
            fs.publish("-failover-abort-not-elected", old)
            self.hit_until(d, line, True, "p1 counting again")
            self.assertEqual(value(p1), held - 1)
            # Again, to the end: +switch-master moves the store to p2 (a fresh server).
            fs.publish("+try-failover", old)
            self.hit_until(d, line, False, "a hit answered by policy")
            fs.publish("+switch-master", "divvyd 127.0.0.1 %d 127.0.0.1 %d" % (p1.port, p2.port))
            self.hit_until(d, line, True, "a hit on the new primary")
            self.assertEqual(value(p2), self.LIMIT - 1)
            self.assertEqual(value(p1), held - 1)
            self.assertIn("the sentinels named a new primary, 127.0.0.1:%d" % p2.port, d.log_text())
            # The sentinel still names p1 (as one that has not heard would): it is never followed.
            n = fs.lookups
            redisfix.wait_until(lambda: fs.lookups >= n + 2, 20, "two more lookups", d.log_tail)
            self.assertHit(d.request(line), True, self.LIMIT - 2, (1, 3600))
            self.assertEqual(value(p1), held - 1)

    def test_started_during_a_failover(self):
        # A divvyd started (or subscribed again) in the middle of a failover missed its start:
        # the sentinel's flags say it is under way, and the primary is held until it ends.
        with redisfix.RedisServer() as p1, redisfix.FakeSentinel("divvyd", (p1.host, p1.port)) as fs:
            fs.flags = "master,failover_in_progress"
            d = self.start_daemon(CONFIG, args=store_args("redis+sentinel://%s/divvyd" % fs.address))
            u = uid()
            line = "HIT type=fleet u=%s" % u
            redisfix.wait_until(lambda: fs.subscribers(7) == 1, 20, "divvyd subscribed to the failover events",
                                d.log_tail)
            # (a hit read before the sentinel's reply was may still count)
            before = sum(1 for r in self.hit_until(d, line, False, "a hit answered by policy") if parse_ok(r)[0])
            for _ in range(20):
                self.assertEqual(d.request(line), "OK false 0 3600")
            c = p1.client()
            try:
                value = c.get(self.fleet_key(u))
            finally:
                c.close()
            self.assertEqual(value, None if before == 0 else str(self.LIMIT - before).encode())
            fs.publish("-failover-abort-not-elected", "master divvyd 127.0.0.1 %d" % p1.port)
            self.hit_until(d, line, True, "p1 counting after the abort")

    def test_planned_failover_loses_nothing(self):
        with redisfix.Sentinels() as s, redisfix.SentinelEvents(s) as ev:
            old = s.primary_address()
            a = self.start_daemon(CONFIG, args=store_args(s.url()))
            u = uid()
            line = "HIT type=fleet u=%s" % u
            load_a, load_b = redisfix.HitLoad(a, line), None
            try:
                self.wait_hits(load_a, 100)
                s.failover(wait_old_replica=False)
                # The old primary is alive and still says master (Sentinel demotes it seconds
                # later): a divvyd started now goes to the new one, and both count there.
                b = self.start_daemon(CONFIG, args=store_args(s.url()))
                load_b = redisfix.HitLoad(b, line)
                self.wait_hits(load_b, 100)
                n = load_a.count()
                self.wait_hits(load_a, n + 100)
            finally:
                load_a.stop()
                if load_b:
                    load_b.stop()
            self.assertIsNone(load_a.error or load_b.error)
            acked, recorded, lost, doubled = self.count(s, u, load_a, load_b)
            note = "acknowledged %d, in the counter %d, by policy %d + %d, old primary now %s, events %r\n%s\n%s" % (
                acked, recorded, load_a.by_policy(), load_b.by_policy(), s.server_at(old).role(), ev.events,
                a.log_tail(), b.log_tail())
            self.assertEqual(lost, 0, "decrements lost: " + note)
            self.assertEqual(doubled, 0, "credits granted twice: " + note)
            self.assertGreater(len(load_b.acknowledged()), 0, note)
            self.assertGreater(len(load_a.acknowledged()), 100, note)
            self.assertIn("the sentinels named a new primary", a.log_text())

    def test_killed_primary_loses_only_unreplicated(self):
        with redisfix.Sentinels() as s, redisfix.SentinelEvents(s) as ev:
            a = self.start_daemon(CONFIG, args=store_args(s.url()))
            u = uid()
            load = redisfix.HitLoad(a, "HIT type=fleet u=%s" % u)
            try:
                self.wait_hits(load, 100)
                s.provoke_failover(restart_old=False)
                n = load.count()
                self.wait_hits(load, n + 100)
            finally:
                load.stop()
            self.assertIsNone(load.error)
            acked, recorded, lost, doubled = self.count(s, u, load)
            note = "acknowledged %d, in the counter %d, by policy %d, events %r\n%s" % (
                acked, recorded, load.by_policy(), ev.events, a.log_tail())
            # Replication is asynchronous: what the primary acknowledged and had not sent to its
            # replica when it died is lost, and those credits are granted again, once each. On
            # loopback, with one request in flight, that is the last one or none.
            self.assertGreaterEqual(lost, 0, note)
            self.assertLessEqual(lost, 2, note)
            self.assertEqual(doubled, lost, note)
            self.assertIsNotNone(ev.first("+switch-master"), note)
            # it followed the sentinels' announcement
            self.assertIn("the sentinels named a new primary", a.log_text(), note)
            # and the new primary acknowledged hits after the announcement (not necessarily the
            # last one: a loaded machine can make a sentinel start another failover right after,
            # and then the store rightly holds the primary again)
            switched = ev.first("+switch-master")
            self.assertTrue(any(at > switched for at, _ in load.acknowledged()), note)


@unittest.skipIf(redisfix is None or (redisfix and redisfix.missing()),
                 "redis-server/redis-sentinel or python3-redis missing")
class Cluster(harness.DaemonTestCase):
    def test_slot_migration_while_hitting(self):
        with redisfix.Cluster() as cl:
            d = self.start_daemon(CONFIG, args=store_args(cl.url()))
            actors = [uid() for _ in range(20)]
            for a in actors:
                self.assertHit(d.request("HIT type=deny u=%s" % a), True, 1, (59, 60))
            # the actor's counters live in the slot of its hash tag
            victim = actors[0]
            slot = redisfix.key_slot("{%s}" % victim)
            src = cl.owner(slot)
            dst = next(n for n in cl.nodes if n is not src)
            seen = []

            def during(src, dst):
                # the slot is migrating, the actor's counter already on dst: ASK
                seen.append(d.request("HIT type=deny u=%s" % victim))
                seen.append(d.request("TAKE 1 type=tb u=%s" % victim))

            cl.migrate_slot(slot, dst, during=during)
            self.assertEqual(len(seen), 2)
            self.assertEqual(parse_ok(seen[0])[:2], (True, 0), seen)
            self.assertTrue(seen[1].startswith("OK allowed=true credit=2 "), seen)
            # after it: MOVED followed, the same counters (exactly 2 per 60 s), on dst
            self.assertEqual(parse_ok(d.request("HIT type=deny u=%s" % victim))[:2], (False, 0))
            self.assertTrue(d.request("TAKE 1 type=tb u=%s" % victim).startswith("OK allowed=true credit=1 "))
            self.assertEqual(cl.owner(slot), dst)
            for a in actors[1:]:
                self.assertHit(d.request("HIT type=deny u=%s" % a), True, 0, (58, 60))


def missing():
    return redisfix is None or redisfix.missing()


def signal_pending(pid, sig):
    """True while sig is pending for process pid (not yet read from its signalfd): from
    /proc/PID/status, the kernel's own account."""
    bit = 1 << (sig - 1)
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & bit:
                return True
    return False


@unittest.skipIf(missing(), "redis-server/redis-sentinel or python3-redis missing")
class Reload(harness.DaemonTestCase):
    def test_reload_waits_for_no_new_batch(self):
        with redisfix.RedisServer() as redis:
            config = os.path.join(redis.dir, "rules.ini")
            shutil.copy(CONFIG, config)
            d = self.start_daemon(config, args=["--store=%s" % redis.url(), "--backend-timeout=60000"])
            u = uid()
            self.assertHit(d.request("HIT type=deny u=%s" % u), True, 1, (59, 60))  # connected
            with open(CONFIG) as f:
                rules = f.read()
            with open(config, "w") as f:  # a new first rule; before, [default] (100) matched
                f.write("[type=new u=*]\ncreditLimit = 7\nresetSeconds = 60\nactorField = u\n\n" + rules)
            redis.pause()
            try:
                with d.connect("unix") as a, d.connect("unix") as b:
                    a.send("HIT type=deny u=%s\n" % u)  # batch A: in flight, Redis is silent
                    redisfix.wait_until(lambda: harness.unix_peer_unread(a.sock) == 0, harness.IO_TIMEOUT,
                                        "the daemon reading A")
                    d.signal(signal.SIGHUP)  # the reload waits for A ...
                    redisfix.wait_until(lambda: not signal_pending(d.pid(), signal.SIGHUP), harness.IO_TIMEOUT,
                                        "the daemon taking SIGHUP")
                    b.send("HIT type=new u=%s\n" % u)  # ... and B waits for the reload
                    redisfix.wait_until(lambda: harness.unix_peer_unread(b.sock) == 0, harness.IO_TIMEOUT,
                                        "the daemon reading B")
                    redis.resume()
                    self.assertHit(a.readline(), True, 0, (58, 60))
                    self.assertHit(b.readline(), True, 6, (59, 60), d.log_tail())
            finally:
                redis.resume()
            self.assertIn("Reloaded ", d.log_text())


@unittest.skipIf(missing(), "redis-server/redis-sentinel or python3-redis missing")
class ClusterRouting(harness.DaemonTestCase):
    def test_cluster_first_use_of_a_node_is_not_an_outage(self):
        with redisfix.Cluster() as cl:
            d = self.start_daemon(CONFIG, args=["--store=%s" % cl.url(), "--backend-timeout=5000"])
            # one actor served by each node, in turn: each node's connection opens on its first call
            for node in cl.nodes:
                a = next(x for x in (uid() for _ in range(1000)) if cl.node_for_key("{%s}" % x) is node)
                self.assertHit(d.request("HIT type=deny u=%s" % a), True, 1, (59, 60))
                self.assertHit(d.request("HIT type=deny u=%s" % a), True, 0, (59, 60))  # in Redis
            log = d.log_text()
            self.assertRegex(log, r"is up \(127\.0\.0\.1:\d+\)")  # not "is up ()"
            self.assertNotRegex(log, r"Store .* is (down|connecting|breaker-open)", d.log_tail())

    def test_chain_split_by_a_migration_waits_for_it(self):
        with redisfix.Cluster() as cl:
            http = harness.free_tcp_port()
            # the longest --backend-timeout there is: not scaled, the option's own maximum
            d = self.start_daemon(CONFIG, args=["--store=%s" % cl.url(), "--backend-timeout=60000",
                                                "--http-port=%d" % http])
            a = uid()
            hit = "HIT chain=%s u=%s" % (a, a)  # [chain=* u=*] continue + [chain=*]: two keys, one slot
            self.assertEqual(parse_ok(d.request(hit))[:2], (True, 1))
            slot = redisfix.key_slot("{%s}" % a)
            dst = next(n for n in cl.nodes if n is not cl.owner(slot))
            src = cl.begin_migration(slot, dst)
            self.assertEqual(cl.move_keys(slot, src, dst, batch=1, max_keys=1), 1)  # the chain is split

            def tryagains():  # python3-redis 4.3 leaves "count=N" unparsed
                v = src.info("errorstats").get("errorstat_TRYAGAIN", {})
                return v.get("count", 0) if isinstance(v, dict) else int(str(v).split("=")[1])

            with d.connect("unix") as c:
                c.send(hit + "\n")
                # retried for longer than 3 x 5 ms, and not answered meanwhile
                redisfix.wait_until(lambda: tryagains() >= 6 or c.buf or select.select([c.sock], [], [], 0)[0],
                                    harness.IO_TIMEOUT, "6 TRYAGAIN or a reply", d.log_tail)
                if tryagains() < 6:
                    self.fail("answered before the migration ended: %s" % c.readline())
                cl.move_keys(slot, src, dst)
                cl.finish_migration(slot, src, dst)
                # counted in Redis after the migration: the second hit of the chain, no fallback
                self.assertEqual(parse_ok(c.readline())[:2], (True, 0), d.log_tail())
            samples = harness.prometheus_samples(harness.http_get(http)[2])
            for policy in ("allow", "deny", "local"):
                self.assertEqual(samples['divvyd_backend_fallbacks_total{policy="%s"}' % policy], 0)
            self.assertEqual(parse_ok(d.request(hit))[:2], (False, 0))  # 2 per u, on dst

    def test_clusterdown_is_a_server_error(self):
        with redisfix.Cluster() as cl:
            http = harness.free_tcp_port()
            d = self.start_daemon(CONFIG, args=["--store=%s" % cl.url(), "--backend-timeout=5000",
                                                "--http-port=%d" % http])
            a = uid()
            self.assertHit(d.request("HIT type=deny u=%s" % a), True, 1, (59, 60))
            slot = redisfix.key_slot("{%s}" % a)
            for n in cl.nodes:  # nobody serves the slot: "-CLUSTERDOWN Hash slot not served"
                n.client().execute_command("CLUSTER DELSLOTS", slot)
            self.assertEqual(parse_ok(d.request("HIT type=deny u=%s" % a))[:2], (False, 0))  # by policy

            def errors():  # published with the store's other counters, once a second
                return {k: v for k, v in harness.prometheus_samples(harness.http_get(http)[2]).items()
                        if k.startswith("divvyd_backend_errors_total")}

            redisfix.wait_until(lambda: sum(errors().values()) > 0, harness.IO_TIMEOUT, "the error counted",
                                d.log_tail)
            self.assertEqual(errors(), {'divvyd_backend_errors_total{kind="%s"}' % k: (k == "server")
                                        for k in ("timeout", "connection", "protocol", "server")})


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


def node_divvy_key(ops, actor, limit, reset):
    """Node divvy 1.7's key: its Object.keys(operation).sort() compares UTF-16 code units."""
    pairs = ["%s=%s" % (k, ops[k]) for k in sorted(ops, key=lambda k: k.encode("utf-16-be"))]
    return "divvy:%s:%s:%d:%d" % (" ".join(pairs), actor, limit, reset)


@unittest.skipIf(missing(), "redis-server/redis-sentinel or python3-redis missing")
class DivvyKeys(harness.DaemonTestCase):
    def write_rules(self, redis, text):
        config = os.path.join(redis.dir, "rules.ini")
        with open(config, "w", encoding="utf-8") as f:
            f.write(text + "\n[default]\ncreditLimit = 100\nresetSeconds = 60\n")
        return config

    def test_key_order_is_node_divvys(self):
        ops = {"\U0001F600": "2", "\uFF01": "x"}  # U+1F600 before U+FF01 in UTF-16, after in bytes
        with redisfix.RedisServer() as redis:
            config = self.write_rules(redis, "[\uFF01=x \U0001F600=2]\ncreditLimit = 5\nresetSeconds = 60\n")
            d = self.start_daemon(config, args=["--store=%s" % redis.url(), "--backend-timeout=5000"])
            key = node_divvy_key(ops, "", 5, 60)
            self.assertEqual(key, "divvy:\U0001F600=2 \uFF01=x::5:60")
            c = redis.client()
            c.setex(key, 60, 2)  # Node divvy allowed three hits of five in this window
            replies = [parse_ok(d.request("HIT \uFF01=x \U0001F600=2"))[:2] for _ in range(3)]
            self.assertEqual(replies, [(True, 1), (True, 0), (False, 0)])  # five in all, not eight
            self.assertEqual(c.keys("divvy:*"), [key.encode()])
            c.close()

    def test_keys_that_can_meet_are_warned_of(self):
        rule = "[%s]\ncreditLimit = 3\nresetSeconds = 60\nactorField = user\n\n"
        with redisfix.RedisServer() as redis:
            config = self.write_rules(redis, rule % "path=/x" + rule % "path=/x:y")
            for compat in ([], ["--compat=divvy"]):
                p = subprocess.run([harness.divvyd_path(), "--check-config"] + compat + [config],
                                   capture_output=True, text=True, timeout=harness.IO_TIMEOUT)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn("%s:1: warning: rule [path=/x] shares divvy keys with rule [path=/x:y] (line 6): in "
                              "Redis its actor \"y:X\" and that rule's actor \"X\" are one counter, "
                              "\"divvy:path=/x:y:X:3:60\"" % config, p.stderr)
            # what it warns of, on a real Redis: "y:A" of [path=/x] spends the counter of A of [path=/x:y]
            d = self.start_daemon(config, args=["--store=%s" % redis.url(), "--backend-timeout=5000"])
            self.assertIn("<4>%s:1: warning: rule [path=/x] shares divvy keys with rule [path=/x:y]" % config,
                          d.log_text())  # and the daemon logs it
            a = uid()
            self.assertEqual([parse_ok(d.request("HIT path=/x user=y:%s" % a))[:2] for _ in range(3)],
                             [(True, 2), (True, 1), (True, 0)])
            self.assertEqual(parse_ok(d.request("HIT path=/x:y user=%s" % a))[:2], (False, 0))
            c = redis.client()
            self.assertEqual(c.keys("divvy:*"), [("divvy:path=/x:y:%s:3:60" % a).encode()])
            c.close()

    def test_compat_accepts_on_backend_error(self):
        # Node divvy ignores onBackendError; it decides only what Redis does not answer
        rule = "[type=%s]\ncreditLimit = 3\nresetSeconds = 60\nonBackendError = %s\n\n"
        with redisfix.RedisServer() as redis:
            config = self.write_rules(redis, rule % ("a", "allow") + rule % ("d", "deny") + rule % ("l", "local"))
            p = subprocess.run([harness.divvyd_path(), "--check-config", "--compat=divvy", config],
                               capture_output=True, text=True, timeout=harness.IO_TIMEOUT)
            self.assertEqual((p.returncode, p.stderr), (0, ""))
            # and the counters are divvy's
            d = self.start_daemon(config, args=["--store=%s" % redis.url(), "--backend-timeout=5000"])
            self.assertEqual(parse_ok(d.request("HIT type=d"))[:2], (True, 2))
            c = redis.client()
            self.assertEqual(c.get("divvy:type=d::3:60"), b"2")
            c.close()


class FakeCluster:
    """A Redis Cluster of n primaries faked by one thread on n loopback ports: CLUSTER SLOTS
    gives each port an equal share of the slots, SCRIPT LOAD the text's SHA1, PING PONG, and a
    script call an error reply (a hit is then decided by its policy: only the connections
    matter here). Stopped (its thread joined) on exit."""

    def __init__(self, n):
        self.n = n
        self.listeners = []
        self.ranges = []
        self.called = set()  # the ports that received a script call
        self.loading = False  # True: every command answers -LOADING (a restart reading its RDB)

    def __enter__(self):
        import selectors
        import threading
        self.sel = selectors.DefaultSelector()
        for _ in range(self.n):
            ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind(("127.0.0.1", 0))
            ls.listen(16)
            ls.setblocking(False)
            self.listeners.append(ls)
            self.sel.register(ls, selectors.EVENT_READ, None)
        per = redisfix.CLUSTER_SLOTS // self.n
        for i, ls in enumerate(self.listeners):
            end = redisfix.CLUSTER_SLOTS - 1 if i == self.n - 1 else (i + 1) * per - 1
            self.ranges.append((i * per, end, ls.getsockname()[1]))
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join(harness.IO_TIMEOUT)
        for key in list(self.sel.get_map().values()):
            key.fileobj.close()
        self.sel.close()

    def url(self):
        return "redis+cluster://127.0.0.1:%d" % self.ranges[0][2]

    def port_of(self, slot):
        return next(port for start, end, port in self.ranges if start <= slot <= end)

    @staticmethod
    def bulk(b):
        return b"$%d\r\n%s\r\n" % (len(b), b)

    def answer(self, argv):
        cmd = [a.upper() for a in argv[:2]]
        if self.loading:
            return b"-LOADING Redis is loading the dataset in memory\r\n"
        if cmd == [b"CLUSTER", b"SLOTS"]:
            out = b"*%d\r\n" % len(self.ranges)
            for start, end, port in self.ranges:
                out += b"*3\r\n:%d\r\n:%d\r\n*2\r\n%s:%d\r\n" % (start, end, self.bulk(b"127.0.0.1"), port)
            return out
        if cmd == [b"SCRIPT", b"LOAD"]:
            return self.bulk(hashlib.sha1(argv[2]).hexdigest().encode())
        if cmd[:1] == [b"PING"]:
            return b"+PONG\r\n"
        return b"-ERR a fake cluster node\r\n"

    parse = staticmethod(redisfix.parse_command)

    def run(self):
        import selectors
        while not self.stop:
            for key, _ in self.sel.select(0.05):
                if key.data is None:
                    try:
                        c, _ = key.fileobj.accept()
                    except BlockingIOError:
                        continue
                    c.setblocking(True)
                    self.sel.register(c, selectors.EVENT_READ, [b"", key.fileobj.getsockname()[1]])
                    continue
                try:
                    data = key.fileobj.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    self.sel.unregister(key.fileobj)
                    key.fileobj.close()
                    continue
                key.data[0] += data
                for _ in range(10000):  # bounded: each round takes one command
                    argv, key.data[0] = self.parse(key.data[0])
                    if argv is None:
                        break
                    if argv[0].upper() in (b"EVALSHA", b"EVAL"):
                        self.called.add(key.data[1])
                    key.fileobj.sendall(self.answer(argv))


@unittest.skipIf(redisfix is None, "python3-redis missing")
class ManyNodes(harness.DaemonTestCase):
    def test_cluster_of_more_than_64_nodes(self):
        n = 70
        with FakeCluster(n) as fc:
            http = harness.free_tcp_port()
            d = self.start_daemon(CONFIG, args=["--store=%s" % fc.url(), "--backend-timeout=2000",
                                                "--http-port=%d" % http])
            # one actor on each node, so that the store opens a connection to every one
            actors = {}
            for i in range(200000):  # bounded: about n * log(n) * 16384 / n tries
                a = "m-%d-%d" % (os.getpid(), i)
                actors.setdefault(fc.port_of(redisfix.key_slot("{%s}" % a)), a)
                if len(actors) == n:
                    break
            self.assertEqual(len(actors), n)
            for a in actors.values():  # the fake answers errors: decided by policy (deny)
                self.assertEqual(parse_ok(d.request("HIT type=deny u=%s" % a))[:2], (False, 0))
            # each hit's call reached its node before its answer
            self.assertEqual(sorted(fc.called), sorted(actors), d.log_tail())
            self.assertNotIn("Too many open files", d.log_text())

    def test_loading_server_is_not_up(self):
        with FakeCluster(1) as fake:  # one port: a single server for redis://
            fake.loading = True
            http = harness.free_tcp_port()
            d = self.start_daemon(CONFIG, args=["--store=redis://127.0.0.1:%d" % fake.ranges[0][2],
                                                "--backend-timeout=2000", "--http-port=%d" % http])
            u = uid()
            self.assertEqual(parse_ok(d.request("HIT type=deny u=%s" % u))[:2], (False, 0))  # policy
            samples = harness.prometheus_samples(harness.http_get(http)[2])
            self.assertEqual(samples.get("divvyd_backend_up"), 0, d.log_tail())
            self.assertNotRegex(d.log_text(), r"Store \S+ is up", d.log_tail())
            d.wait_note(re.compile(r"^STATUS=Serving .*, redis (down|connecting) \(.*: LOADING "), after=0,
                        what="STATUS saying why")
            # loaded: the store is up again on its own, and counts
            fake.loading = False
            redisfix.wait_until(lambda: harness.prometheus_samples(harness.http_get(http)[2]).get(
                "divvyd_backend_up") == 1, 10 * harness.IO_TIMEOUT, "divvyd_backend_up 1", d.log_tail)
            self.assertRegex(d.log_text(), r"Store \S+ is up", d.log_tail())


if __name__ == "__main__":
    harness.main()
