#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""node-redis and ioredis (pinned in tests/node-redis-clients/package.json) with their default
options against divvyd's RESP (issue #33): connect, a HIT, a pipeline of HITs and a
MULTI/EXEC of HITs. Installs them with npm into $top_builddir/tests/node-redis-clients-deps on
first use; skips (exit 77, with the reason) when node or npm is missing or the install fails.

Run:  tests/integration/test_redis_clients.py
"""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import data_path  # noqa: E402

NODE_TIMEOUT = 60 * harness.TIMEOUT_SCALE  # seconds: one client's script


def pkg_dir():
    return os.path.join(harness.top_srcdir(), "tests", "node-redis-clients")


class RedisClients(harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.d = cls.start_shared_daemon(data_path("itest.ini"))

    def run_client(self, client):
        """Runs clients.js for one library; returns its JSON object."""
        user = "rc-%d" % os.getpid()  # clients.js adds one suffix per library: own counters
        env = dict(os.environ, DIVVYD_PORT=str(self.d.port), DIVVYD_USER=user, NODE_PATH=MODULES,
                   DIVVYD_CLIENT_TIMEOUT_MS=str(int(NODE_TIMEOUT - 10) * 1000))
        try:
            p = subprocess.run([shutil.which("node"), os.path.join(pkg_dir(), "clients.js"), client],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=NODE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail("%s did not finish within %ds" % (client, NODE_TIMEOUT))
        out, err = (p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"))
        print(out + err)
        # exit 2: connect (or a reply) never came, the bug of node-redis on RESP3 before #33
        self.assertEqual(p.returncode, 0, out + err)
        return json.loads(out.strip().splitlines()[-1])

    def assertHits(self, replies, credits, shape):
        """Each reply is RESP3's HIT map (both clients speak RESP3 by default): allowed, credit,
        reset, credits left one fewer each time. shape: how the client gives a map, "object"
        (node-redis: {allowed: true, ...}) or "flat" (ioredis: [key, value, ...], its boolean as 1)."""
        for r, credit in zip(replies, credits):
            if shape == "flat":
                self.assertEqual(r[0::2], ["allowed", "credit", "reset"], r)
                r = dict(zip(r[0::2], r[1::2]))
                self.assertEqual(r["allowed"], 1, r)
            else:
                self.assertEqual(sorted(r), ["allowed", "credit", "reset"], r)
                self.assertIs(r["allowed"], True, r)
            self.assertEqual(r["credit"], credit, r)
            self.assertTrue(3590 <= r["reset"] <= 3600, r)
        self.assertEqual(len(replies), len(credits))

    def test_node_redis(self):
        r = self.run_client("node-redis")
        self.assertEqual(r["client"], "node-redis")
        self.assertHits([r["hit"]], [9], "object")
        self.assertHits(r["pipeline"], [8, 7, 6], "object")
        self.assertHits(r["multi"], [5, 4, 3], "object")

    def test_ioredis(self):
        r = self.run_client("ioredis")
        self.assertEqual(r["client"], "ioredis")
        self.assertHits([r["hit"]], [9], "flat")
        # ioredis' pipeline and exec give [error, reply] pairs
        self.assertEqual([e for e, _ in r["pipeline"] + r["multi"]], [None] * 6)
        self.assertHits([v for _, v in r["pipeline"]], [8, 7, 6], "flat")
        self.assertHits([v for _, v in r["multi"]], [5, 4, 3], "flat")


if __name__ == "__main__":
    if not os.access(harness.divvyd_path(), os.X_OK):
        harness.skip_all("daemon binary %s not found" % harness.divvyd_path())
    MODULES = harness.npm_install(pkg_dir(),
                                  os.path.join(harness.top_builddir(), "tests", "node-redis-clients-deps"),
                                  os.path.join("ioredis", "package.json"), "node-redis and ioredis clients")
    harness.main()
