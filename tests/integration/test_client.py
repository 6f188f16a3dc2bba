#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The `divvy` command against the real divvyd: exit codes, output formats, addresses,
quoting, --wait, errors. (The library itself is tested by tests/check_client.c.)

Run one test:  tests/integration/test_client.py Hit.test_exit_codes
"""

import itertools
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import data_path  # noqa: E402

_ids = itertools.count(1)
RUN_TIMEOUT = 30 * harness.TIMEOUT_SCALE  # seconds: bound on one divvy run (--wait included)


def uid(prefix):
    """A fresh actor value, so no two tests share a counter."""
    return "%s-%d-%d" % (prefix, os.getpid(), next(_ids))


def divvy_path():
    return os.environ.get("DIVVY") or os.path.join(harness.top_builddir(), "src", "divvy")


def run(*args, env=None):
    """Runs divvy; returns (exit status, stdout, stderr)."""
    e = dict(os.environ)
    e.pop("DIVVY_ADDRESS", None)
    e.update(env or {})
    p = subprocess.run([divvy_path()] + list(args), stdin=subprocess.DEVNULL, capture_output=True,
                       env=e, timeout=RUN_TIMEOUT)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


class ClientCase(harness.DaemonTestCase):
    def assertCli(self, result, rc, allowed, credit, reset):
        """divvy hit's output "ALLOWED CREDIT RESET" with exit status rc and nothing on stderr;
        reset exact (an int) or within a (lo, hi) range, e.g. self.since_start(3600) for a
        counter hit again by a later process: each launch takes its own time."""
        got_rc, out, err = result
        self.assertEqual((got_rc, err), (rc, ""), "divvy hit: %r" % (result,))
        m = re.match(r"^(true|false) (\d+) (-?\d+)\n$", out)
        self.assertIsNotNone(m, "divvy hit printed %r" % out)
        self.assertEqual((m.group(1) == "true", int(m.group(2))), (allowed, credit), out)
        lo, hi = reset if isinstance(reset, tuple) else (reset, reset)
        self.assertTrue(lo <= int(m.group(3)) <= hi, "reset %s not in [%d, %d]" % (m.group(3), lo, hi))


class Hit(ClientCase):
    @classmethod
    def setUpClass(cls):
        cls.d = cls.start_shared_daemon(data_path("client.ini"))
        cls.sock = ["--socket", cls.d.unix_path]

    def assertError(self, result, fragment):
        rc, out, err = result
        self.assertEqual(rc, 2, "expected exit 2: %r" % (result,))
        self.assertEqual(out, "")
        self.assertTrue(err.startswith("divvy: ") and err.endswith("\n") and err.count("\n") == 1,
                        "not one line on stderr: %r" % err)
        self.assertIn(fragment, err)

    def test_exit_codes(self):
        user = "user=" + uid("codes")
        t0 = time.monotonic()
        self.assertEqual(run("hit", *self.sock, "path=/limited", user), (0, "true 1 3600\n", ""))
        self.assertCli(run("hit", *self.sock, "path=/limited", user), 0, True, 0, harness.elapsed_bounds(3600, t0))
        self.assertCli(run("hit", *self.sock, "path=/limited", user), 1, False, 0, harness.elapsed_bounds(3600, t0))
        self.assertEqual(run("hit", *self.sock, "path=/closed"), (1, "false 0 -1\n", ""))
        self.assertEqual(run("hit", *self.sock, "path=/open"), (0, "true 5 0\n", ""))
        self.assertEqual(run("hit", *self.sock), (1, "false 0 -1\n", ""), "(no pairs: default rule)")

    def test_json_and_quiet(self):
        user = "user=" + uid("json")
        rc, out, err = run("hit", "--json", *self.sock, "path=/limited", user)
        self.assertEqual((rc, err), (0, ""))
        self.assertEqual(out, '{"allowed":true,"credit":1,"reset":3600}\n')
        self.assertEqual(json.loads(out), {"allowed": True, "credit": 1, "reset": 3600})
        self.assertEqual(run("hit", "--quiet", *self.sock, "path=/limited", user), (0, "", ""))
        self.assertEqual(run("hit", "-q", *self.sock, "path=/limited", user), (1, "", ""))
        rc, out, _ = run("hit", "--json", *self.sock, "path=/closed")
        self.assertEqual((rc, json.loads(out)), (1, {"allowed": False, "credit": 0, "reset": -1}))

    def test_addresses(self):
        port = str(self.d.port)
        forms = [
            ["--socket", self.d.unix_path],
            ["--address", "unix:" + self.d.unix_path],
            ["--address", self.d.unix_path],
            ["--address", "tcp:127.0.0.1:" + port],
            ["--address", "127.0.0.1:" + port],
            ["--host", "127.0.0.1", "--port", port],
            ["--port", port],  # host defaults to 127.0.0.1
            ["-a", "localhost:" + port],
        ]
        for form in forms:
            self.assertEqual(run("hit", *form, "path=/open"), (0, "true 5 0\n", ""), form)
        # Options may come before the command, and the environment names the default.
        self.assertEqual(run("--json", "hit", "path=/open", env={"DIVVY_ADDRESS": "unix:" + self.d.unix_path}),
                         (0, '{"allowed":true,"credit":5,"reset":0}\n', ""))
        # The command line wins over the environment.
        self.assertEqual(run("hit", "--port", port, "path=/open", env={"DIVVY_ADDRESS": "/nonexistent"}),
                         (0, "true 5 0\n", ""))

    def test_quoting_round_trip(self):
        # The rule is [path="/a b" q="x=y z" user=*]: only values that arrive intact match it.
        user = "user=" + uid("quote") + " with spaces"
        t0 = time.monotonic()
        self.assertEqual(run("hit", *self.sock, "path=/a b", "q=x=y z", user), (0, "true 99 3600\n", ""))
        self.assertCli(run("hit", *self.sock, "path=/a b", "q=x=y z", user), 0, True, 98,
                       harness.elapsed_bounds(3600, t0))
        self.assertEqual(run("hit", *self.sock, "path=/a b", "q=x=y", user), (1, "false 0 -1\n", ""))
        # The daemon saw the same counter as a raw client sending the quoted form.
        self.assertHit(self.d.request('HIT path="/a b" q="x=y z" %s' % user.replace("user=", 'user="') + '"'),
                       True, 97, harness.elapsed_bounds(3600, t0))

    def test_unsendable_values(self):
        self.assertError(run("hit", *self.sock, 'path=/a"b'), "'\"'")
        self.assertError(run("hit", *self.sock, "path=/a\nHIT path=/open"), "line break")
        self.assertError(run("hit", *self.sock, "path=/a\rb"), "line break")

    def test_wait_one_second_window(self):
        user = "user=" + uid("wait")
        self.assertEqual(run("hit", *self.sock, "path=/second", user), (0, "true 0 1\n", ""))
        # Denied now and the window resets after the limit: gives up at once.
        self.assertEqual(run("hit", "--wait=0.2", *self.sock, "path=/second", user), (1, "false 0 1\n", ""))
        # Denied, sleeps until the reset, then allowed (the window is one second: bounded).
        rc, out, err = run("hit", "--wait=10", *self.sock, "path=/second", user)
        self.assertEqual((rc, out, err), (0, "true 0 1\n", ""))
        # Without a limit it waits as long as it takes, here about a second.
        self.assertEqual(run("hit", *self.sock, "--wait", "path=/second", user)[0], 0)
        # An always-deny rule never resets: --wait returns at once.
        self.assertEqual(run("hit", "--wait=30", *self.sock, "path=/closed"), (1, "false 0 -1\n", ""))

    def test_ping(self):
        self.assertEqual(run("ping", *self.sock), (0, "unix:%s is alive\n" % self.d.unix_path, ""))
        self.assertEqual(run("ping", "--quiet", "--port", str(self.d.port)), (0, "", ""))
        # --json prints JSON here too (it printed the text line), and --quiet still wins.
        self.assertEqual(run("ping", "--json", *self.sock),
                         (0, '{"alive":true,"address":"unix:%s"}\n' % self.d.unix_path, ""))
        self.assertEqual(run("ping", "--json", "--quiet", *self.sock), (0, "", ""))


class Examples(ClientCase):
    """examples/: the cron job, the C program and the Python snippet work as documented."""

    @classmethod
    def setUpClass(cls):
        cls.d = cls.start_shared_daemon(data_path("client.ini"))

    def test_cron_job(self):
        a, b = uid("cron-a"), uid("cron-b")
        env = dict(os.environ, DIVVY_ADDRESS="unix:" + self.d.unix_path,
                   PATH=os.path.dirname(divvy_path()) + os.pathsep + os.environ.get("PATH", ""))
        p = subprocess.run(["sh", harness.example_path("divvy-cron.sh")], capture_output=True, env=env,
                           input=("%s a@example.org\n%s b@example.org\n%s a@example.org\n" % (a, b, a)).encode(),
                           timeout=RUN_TIMEOUT)
        self.assertEqual((p.returncode, p.stderr.decode()), (0, ""))
        self.assertEqual(p.stdout.decode().splitlines(), [
            "sending a birthday card to %s <a@example.org>" % a,
            "sending a birthday card to %s <b@example.org>" % b,
            "skipping %s: already sent one this year" % a,
        ])

    def test_c_program(self):
        prog = os.path.join(harness.top_builddir(), "examples", "client")
        if not os.access(prog, os.X_OK):
            self.skipTest("%s not built" % prog)
        # No rule for POST /email/send: the default rule denies.
        p = subprocess.run([prog, "unix:" + self.d.unix_path, uid("c")], capture_output=True,
                           timeout=RUN_TIMEOUT)
        self.assertEqual((p.returncode, p.stdout.decode()), (1, "denied, 0 left, resets in -1 s\n"))

    def test_python_snippet(self):
        sys.path.insert(0, os.path.join(harness.top_srcdir(), "examples"))
        import divvy_client
        user = uid("py") + " x=y"
        for address in ("unix:" + self.d.unix_path, "127.0.0.1:%d" % self.d.port):
            d = divvy_client.Divvy(address)
            self.addCleanup(d.close)
            self.assertEqual(d.hit(path="/open"), (True, 5, 0))
        t0 = time.monotonic()
        self.assertEqual(d.hit(**{"path": "/a b", "q": "x=y z", "user": user}), (True, 99, 3600))
        self.assertCli(run("hit", "--port", str(self.d.port), "path=/a b", "q=x=y z", "user=" + user),
                       0, True, 98, harness.elapsed_bounds(3600, t0))
        with self.assertRaises(ValueError):
            d.hit(path='a"b')


class Errors(ClientCase):
    def test_unreachable(self):
        tmp = harness.make_tmpdir()
        self.addCleanup(os.rmdir, tmp)
        path = os.path.join(tmp, "nobody.sock")
        self.assertError = Hit.assertError.__get__(self)
        self.assertError(run("hit", "--socket", path, "path=/open"), "No such file or directory")
        self.assertError(run("hit", "--address", "127.0.0.1:%d" % harness.free_tcp_port(), "path=/open"),
                         "Connection refused")
        self.assertError(run("ping", "--socket", path), path)

    def test_usage_errors(self):
        self.assertError = Hit.assertError.__get__(self)
        self.assertError(run(), "Missing command")
        self.assertError(run("fly"), "Unknown command 'fly'")
        self.assertError(run("hit", "novalue"), "expected key=value")
        self.assertError(run("hit", "=v"), "expected key=value")
        self.assertError(run("hit", "--socket", "/x", "--port", "1", "a=b"), "exclude each other")
        self.assertError(run("hit", "--wait=soon", "a=b"), "Invalid --wait")
        self.assertError(run("hit", "--timeout", "-1", "a=b"), "Invalid --timeout")
        self.assertError(run("hit", "--address", "::1:8321", "a=b"), "Invalid address")
        self.assertError(run("ping", "a=b"), "no key=value")
        rc, out, err = run("hit", "--bogus")
        self.assertEqual((rc, out), (2, ""))
        self.assertIn("bogus", err)

    def test_help_and_version(self):
        rc, out, err = run("--help")
        self.assertEqual((rc, err), (0, ""))
        self.assertIn("Usage: divvy hit", out)
        rc, out, err = run("--version")
        self.assertEqual((rc, err), (0, ""))
        self.assertRegex(out, r"^divvy \S+ \(libdivvy \S+\)\n$")

    def test_restart_between_runs_and_timeout(self):
        d = self.start_daemon(data_path("client.ini"))
        user = "user=" + uid("restart")
        sock = ["--socket", d.unix_path]
        t0 = time.monotonic()
        self.assertEqual(run("hit", *sock, "path=/limited", user), (0, "true 1 3600\n", ""))
        d.stop()
        self.assertError = Hit.assertError.__get__(self)
        self.assertError(run("hit", *sock, "path=/limited", user), "Failed to connect")
        d.start()
        # A restart and three process launches later: the reset counted down by the time taken.
        self.assertCli(run("hit", *sock, "path=/limited", user), 0, True, 0, harness.elapsed_bounds(3600, t0))
        # A stopped daemon still has its socket accepting: --timeout bounds the wait.
        d.signal(harness.signal.SIGSTOP)
        try:
            self.assertError(run("hit", "--timeout", "0.3", *sock, "path=/limited", user), "Timed out")
            self.assertError(run("ping", "--timeout", "0.3", *sock), "timed out")
        finally:
            d.signal(harness.signal.SIGCONT)


if __name__ == "__main__":
    if not os.access(divvy_path(), os.X_OK):
        harness.skip_all("%s not found (build it first: make src/divvy)" % divvy_path())
    harness.main()
