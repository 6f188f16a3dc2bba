#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The real divvy Node.js client (@button/divvy-client, pinned in tests/node/package.json)
against divvyd. Installs it with npm into $top_builddir/tests/node-deps on first use; skips
(exit 77, with the reason) when node or npm is missing or the install fails.

Run:  tests/integration/test_node.py
"""

import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import data_path  # noqa: E402

NODE_TIMEOUT = 60 * harness.TIMEOUT_SCALE  # seconds: the node test itself


def node_dir():
    return os.path.join(harness.top_srcdir(), "tests", "node")


def deps_dir():
    return os.path.join(harness.top_builddir(), "tests", "node-deps")


def install_deps():
    """Returns the node_modules directory, or calls skip_all() with the reason."""
    return harness.npm_install(node_dir(), deps_dir(), os.path.join("@button", "divvy-client", "package.json"),
                               "divvy Node client")


class NodeClient(harness.DaemonTestCase):
    def test_divvy_client(self):
        self.run_node("itest.ini", "")

    def test_divvy_client_new_algorithms(self):
        """The unchanged client against token buckets, sliding windows and continue rules."""
        self.run_node("verbs.ini", "verbs")

    def run_node(self, config, rules):
        d = self.start_daemon(data_path(config))
        env = dict(os.environ, DIVVYD_HOST="127.0.0.1", DIVVYD_PORT=str(d.port), NODE_PATH=MODULES,
                   DIVVYD_RULES=rules)
        try:
            p = subprocess.run([shutil.which("node"), os.path.join(node_dir(), "test-divvy-client.js")],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=NODE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail("node test did not finish within %ds" % NODE_TIMEOUT)
        out = p.stdout.decode("utf-8", "replace")
        print(out)
        self.assertEqual(p.returncode, 0, out)
        self.assertRegex(out, r"\b[1-9]\d* passed, 0 failed")
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    if not os.access(harness.divvyd_path(), os.X_OK):
        harness.skip_all("daemon binary %s not found" % harness.divvyd_path())
    MODULES = install_deps()
    harness.main()
