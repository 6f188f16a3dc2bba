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

Rules: tests/data/redis.ini. Run one test:
    tests/integration/test_fleet_edges.py Shutdown.test_stop_with_local_fallback_in_flight
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
class Cluster(harness.DaemonTestCase):
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
            d = self.start_daemon(CONFIG, args=["--store=%s" % cl.url(), "--backend-timeout=%d" % (
                60000 * harness.TIMEOUT_SCALE), "--http-port=%d" % http])
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

    @staticmethod
    def parse(buf):
        """(argv, rest) of the first whole command in buf, or (None, buf)."""
        if not buf.startswith(b"*") or b"\r\n" not in buf:
            return None, buf
        head, rest = buf.split(b"\r\n", 1)
        argv = []
        for _ in range(int(head[1:])):
            if b"\r\n" not in rest:
                return None, buf
            h, rest = rest.split(b"\r\n", 1)
            k = int(h[1:])
            if len(rest) < k + 2:
                return None, buf
            argv.append(rest[:k])
            rest = rest[k + 2:]
        return argv, rest

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
