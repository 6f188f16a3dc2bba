# SPDX-License-Identifier: MIT
"""Self-test of the Redis fixtures (redisfix.py) the Redis store's integration tests stand on:
a server starts, serves, dies and comes back on its port; passwords and ACL users are
enforced; the sentinels report a failover, forced and provoked; the cluster comes up with every
slot served and a live slot migration moves the keys (ASK while it runs, then MOVED). Skips
(exit 77) only when redis-server, redis-sentinel, redis-cli or Python's redis module is missing."""

import os
import unittest

import harness
import redisfix
from redisfix import redis


class TestRedisServer(unittest.TestCase):
    def test_start_stop_kill_restart(self):
        with redisfix.RedisServer(unix=True) as r:
            pid, port = r.pid(), r.port
            c = r.client()
            self.assertTrue(c.set("k", "v"))
            self.assertEqual(c.get("k"), b"v")
            c.close()
            u = r.client(unix=True)
            self.assertEqual(u.get("k"), b"v")
            u.close()
            self.assertEqual(r.info("persistence")["aof_enabled"], 0)
            self.assertEqual(r.client().config_get("save"), {"save": ""})
            r.kill()
            self.assertFalse(r.running())
            with self.assertRaises(redis.ConnectionError):
                r.client().ping()
            r.start()
            self.assertEqual(r.port, port)
            self.assertNotEqual(r.pid(), pid)
            self.assertIsNone(r.client().get("k"))  # no persistence: a restart forgets
            self.assertEqual(r.stop(), 0)  # SIGTERM: a clean shutdown
            r.restart()
            self.assertTrue(r.client().ping())
            pid = r.pid()
        with self.assertRaises(ProcessLookupError):
            os.kill(pid, 0)  # stopped by the context manager
        self.assertFalse(os.path.exists(r.tmpdir))

    def test_cleanup_after_failure(self):
        """A test that fails inside the block still stops the server."""
        with self.assertRaises(ZeroDivisionError):
            with redisfix.RedisServer() as r:
                pid = r.pid()
                1 / 0
        with self.assertRaises(ProcessLookupError):
            os.kill(pid, 0)

    def test_password_and_acl_user(self):
        with redisfix.RedisServer(password="s3cret", acl_user=("divvyd", "pw2")) as r:
            self.assertTrue(r.client().ping())
            with self.assertRaisesRegex(redis.RedisError, "WRONGPASS"):
                r.client(password="wrong").ping()
            with self.assertRaisesRegex(redis.RedisError, "(?i)authentication required"):
                r.client(password="").ping()  # no AUTH sent
            self.assertTrue(r.client(username="divvyd", password="pw2").ping())
            self.assertEqual(r.url(3), "redis://:s3cret@127.0.0.1:%d/3" % r.port)

    def test_key_slot_matches_server(self):
        """redisfix.key_slot() (the rule of src/store/redis-cluster.c) = CLUSTER KEYSLOT."""
        with redisfix.RedisServer(cluster=True) as r:
            c = r.client()
            keys = ["foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "",
                    "divvyd:{alice}:0123", b"\xff\x00{x"]
            for k in keys:
                self.assertEqual(redisfix.key_slot(k), c.execute_command("CLUSTER KEYSLOT", k), k)
            for slot in (0, 1, 8000, 16383):
                self.assertEqual(c.execute_command("CLUSTER KEYSLOT", redisfix.key_in_slot(slot)), slot)


class TestSentinels(unittest.TestCase):
    def test_failover_forced_then_provoked(self):
        with redisfix.Sentinels() as s:
            first = s.primary_address()
            self.assertEqual(first, ("127.0.0.1", s.primary.port))
            self.assertTrue(s.url().startswith("redis+sentinel://127.0.0.1:"))
            s.current_primary().client().set("k", "1")
            s.wait_replicated(s.current_primary())

            second = s.failover()
            self.assertEqual(second, ("127.0.0.1", s.replica.port))
            self.assertEqual(s.replica.role(), "master")
            self.assertEqual(s.primary.role(), "slave")  # the old primary follows the new one
            self.assertEqual(s.current_primary().client().get("k"), b"1")  # replicated before

            third = s.provoke_failover()  # kill -9 of the primary
            self.assertEqual(third, first)
            self.assertEqual(s.primary.role(), "master")
            self.assertEqual(s.replica.role(), "slave")
            self.assertEqual(set(s.primary_addresses().values()), {third})


class TestCluster(unittest.TestCase):
    def test_cluster_ok_and_slot_migration(self):
        with redisfix.Cluster() as cl:
            self.assertEqual(len(cl.slots()), 3)
            for n in cl.nodes:
                c = n.client()
                self.assertEqual(c.execute_command("CLUSTER INFO")["cluster_state"], "ok")
                self.assertEqual(c.execute_command("CLUSTER INFO")["cluster_slots_assigned"], "16384")
                c.close()
            slot = redisfix.key_slot("{actor}")
            keys = ["divvyd:{actor}:%032x" % i for i in range(25)]
            src = cl.owner(slot)
            c = src.client()
            for k in keys:
                c.set(k, k)
            dst = next(n for n in cl.nodes if n is not src)
            other = next(n for n in cl.nodes if n is not src and n is not dst)
            # Before: the other node redirects with MOVED to the source.
            with self.assertRaisesRegex(redis.ResponseError, "^MOVED %d 127.0.0.1:%d$" % (slot, src.port)):
                other.client().get(keys[0])

            seen = {}

            def during(s, d):
                self.assertIs(s, src)
                moved = [k for k in keys if self._get_asking(d, k) is not None]
                seen["moved"] = moved
                self.assertEqual(len(moved), 10)
                # A key already moved: the source answers ASK to the destination.
                with self.assertRaisesRegex(redis.ResponseError, "^ASK %d 127.0.0.1:%d$" % (slot, d.port)):
                    s.client().get(moved[0])
                # A key not moved yet: the source still serves it.
                rest = [k for k in keys if k not in moved]
                self.assertEqual(s.client().get(rest[0]), rest[0].encode())
                # Without ASKING the destination refuses with MOVED back to the source.
                with self.assertRaisesRegex(redis.ResponseError, "^MOVED %d 127.0.0.1:%d$" % (slot, s.port)):
                    d.client().get(moved[0])

            self.assertEqual(cl.migrate_slot(slot, dst, batch=10, during=during), 25)
            self.assertEqual(len(seen["moved"]), 10)
            for n in cl.nodes:
                self.assertIs(cl.owner(slot, n), dst)
            d = dst.client()
            self.assertEqual([d.get(k) for k in keys], [k.encode() for k in keys])
            self.assertEqual(src.client().execute_command("CLUSTER COUNTKEYSINSLOT", slot), 0)
            with self.assertRaisesRegex(redis.ResponseError, "^MOVED %d 127.0.0.1:%d$" % (slot, dst.port)):
                src.client().get(keys[0])
            cl.wait_ok()
            # And back, without a pause.
            self.assertEqual(cl.migrate_slot(slot, src), 25)
            self.assertIs(cl.owner(slot), src)

    def test_cluster_with_password(self):
        """requirepass on every node: redis-cli and MIGRATE authenticate."""
        with redisfix.Cluster(password="s3cret") as cl:
            slot = redisfix.key_slot("x")
            src = cl.owner(slot)
            src.client().set("x", "1")
            with self.assertRaisesRegex(redis.RedisError, "(?i)authentication required"):
                src.client(password="").get("x")
            dst = next(n for n in cl.nodes if n is not src)
            self.assertEqual(cl.migrate_slot(slot, dst), 1)
            self.assertEqual(dst.client().get("x"), b"1")

    @staticmethod
    def _get_asking(node, key):
        """GET after ASKING on one connection (ASKING holds for the next command only)."""
        c = node.client(single_connection_client=True)
        try:
            c.execute_command("ASKING")
            return c.get(key)
        finally:
            c.close()


if __name__ == "__main__":
    why = redisfix.missing()
    if why:
        harness.skip_all(why)
    harness.main(require_daemon=False)
