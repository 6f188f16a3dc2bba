#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""envoyproxy/ratelimit's YAML files as divvyd's CONFIG (issue #34): a directory of them, one per
domain, through the line protocol (TAKE 1 domain=<domain> <key>=<value> ...), with the decisions
envoyproxy/ratelimit makes for the same descriptors: clock-aligned windows of its units, a
counter per value of a key without value, exact-depth matching of nested descriptors, a value
without rate_limit exempt from its sibling's limit, the first wildcard, shadow_mode (counted,
never denies), unlimited, no limit for what no descriptor matches. The clock is controlled as in
test_peers.py: divvyd runs with tests/integration/fakeclock.c preloaded, its wall clock frozen at
the value the test writes (harness.FakeClock). Also: SIGHUP reloads the directory (a bad file keeps the rules),
--check-config and --dump-config of a directory, a domain in two files.

Run one test:  tests/integration/test_yaml_config.py YamlConfig.test_aligned_window
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

DAY = 86400
BASE = 1764000000 // DAY * DAY  # a midnight (UTC) on the controlled clock, in seconds
NO_LIMIT = 4294967295  # the credit of a rule that always allows: no limit, as there

API = """\
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, name: per-user}
  - key: client
    value: mobile
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 3}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /health
  - key: path
    value: /static/*
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: probe
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: internal
    rate_limit: {unlimited: true}
"""

WEB = """\
domain: web
descriptors:
  - key: remote_address
    rate_limit:
      unit: week
      requests_per_unit: 1
"""

FIELD_RE = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S*)')


def decision(reply):
    """'OK allowed=true credit=1 ...' -> (allowed, credit, limit, reset, retry)."""
    assert reply.startswith("OK "), reply
    f = dict(FIELD_RE.findall(reply[3:]))
    return (f["allowed"] == "true", int(f["credit"]), int(f["limit"]), int(f["reset"]), int(f["retry"]))


def write(path, text):
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)  # atomic, like a config manager


class YamlConfig(harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        tmp = harness.make_tmpdir()
        cls.addClassCleanup(shutil.rmtree, tmp, True)
        cls.clock = harness.FakeClock(tmp)
        cls.addClassCleanup(cls.clock.close)
        cls.set_clock(BASE)
        cls.env = cls.clock.env()
        cls.tmp = tmp

    @classmethod
    def set_clock(cls, seconds):
        cls.clock.set(int(seconds * 10**9))

    def config_dir(self, files):
        """A new directory holding files {name: text}."""
        d = os.path.join(harness.make_tmpdir(), "config")
        self.addCleanup(shutil.rmtree, os.path.dirname(d), True)
        os.mkdir(d)
        for name, text in files.items():
            write(os.path.join(d, name), text)
        return d

    def daemon(self, files=None):
        return self.start_daemon(self.config_dir(files or {"api.yaml": API, "web.yml": WEB}), env=self.env)

    def take(self, c, pairs):
        return decision(c.request("TAKE 1 " + pairs))

    def test_aligned_window(self):
        # 2 per minute per user, windows on the minute: 2 s before the minute ends, the window
        # ends in 2 s (a window from the first hit would last 60 s).
        d = self.daemon()
        self.set_clock(BASE + 10 * DAY + 58)
        with d.connect() as c:
            self.assertEqual(self.take(c, "domain=api user=alice"), (True, 1, 2, 2, 0))
            self.assertEqual(self.take(c, "domain=api user=alice"), (True, 0, 2, 2, 0))
            self.assertEqual(self.take(c, "domain=api user=alice"), (False, 0, 2, 2, 2))
            self.assertEqual(self.take(c, "domain=api user=bob"), (True, 1, 2, 2, 0))  # per value
            self.set_clock(BASE + 10 * DAY + 60)  # the next minute: a new window
            self.assertEqual(self.take(c, "domain=api user=alice"), (True, 1, 2, 60, 0))

    def test_nested_and_depth(self):
        d = self.daemon()
        self.set_clock(BASE + 20 * DAY + 3600 - 10)
        with d.connect() as c:
            for credit in (2, 1, 0):
                self.assertEqual(self.take(c, "domain=api client=mobile user=carol"), (True, credit, 3, 10, 0))
            self.assertEqual(self.take(c, "domain=api client=mobile user=carol"), (False, 0, 3, 10, 10))
            # another value at the first level, or another depth: no limit
            for pairs in ("domain=api client=desktop user=carol", "domain=api client=mobile",
                          "domain=api client=mobile user=carol extra=1", "domain=api user=carol path=/x"):
                for _ in range(3):
                    self.assertEqual(self.take(c, pairs)[:2], (True, NO_LIMIT), pairs)

    def test_values_wildcards_and_exempt(self):
        d = self.daemon()
        self.set_clock(BASE + 30 * DAY + 5)
        with d.connect() as c:
            self.assertEqual(self.take(c, "domain=api path=/a")[:2], (True, 0))
            self.assertEqual(self.take(c, "domain=api path=/a")[:2], (False, 0))
            self.assertEqual(self.take(c, "domain=api path=/b")[:2], (True, 0))
            for _ in range(3):  # a value without rate_limit: exempt from the per-path limit
                self.assertEqual(self.take(c, "domain=api path=/health")[:2], (True, NO_LIMIT))
            # the wildcard: 2 a day for each value
            day_left = DAY - 5
            self.assertEqual(self.take(c, "domain=api path=/static/a.css"), (True, 1, 2, day_left, 0))
            self.assertEqual(self.take(c, "domain=api path=/static/a.css"), (True, 0, 2, day_left, 0))
            self.assertEqual(self.take(c, "domain=api path=/static/a.css")[0], False)
            self.assertEqual(self.take(c, "domain=api path=/static/b.css"), (True, 1, 2, day_left, 0))

    def test_shadow_unlimited_and_no_limit(self):
        d = self.daemon()
        self.set_clock(BASE + 40 * DAY)
        with d.connect() as c:
            for _ in range(3):  # shadow_mode: 1 a minute, counted, never denied
                self.assertEqual(self.take(c, "domain=api probe=p")[:2], (True, NO_LIMIT))
                self.assertEqual(self.take(c, "domain=api internal=i")[:2], (True, NO_LIMIT))
                self.assertEqual(self.take(c, "domain=nowhere user=u")[:2], (True, NO_LIMIT))
                self.assertEqual(self.take(c, "user=u")[:2], (True, NO_LIMIT))
            # the other file's domain: 1 a week (weeks counted from the epoch, a Thursday)
            week_left = 7 * DAY - (BASE + 40 * DAY) % (7 * DAY)
            self.assertEqual(self.take(c, "domain=web remote_address=10.0.0.1"), (True, 0, 1, week_left, 0))
            self.assertEqual(self.take(c, "domain=web remote_address=10.0.0.1"), (False, 0, 1, week_left,
                                                                                    week_left))
            # its key in another domain: no limit there
            self.assertEqual(self.take(c, "domain=api remote_address=10.0.0.1")[:2], (True, NO_LIMIT))

    def test_reload(self):
        d = self.daemon()
        self.set_clock(BASE + 50 * DAY)
        conf = d.config
        # a bad file among the good ones: every rule stays
        write(os.path.join(conf, "zz.yaml"), "domain: zz\ndescriptors:\n  - key: k\n    rate_limit:\n"
                                             "      unit: fortnight\n")
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        d.wait_note(re.compile(r"^STATUS=Reload failed"), after=before, what="STATUS=Reload failed")
        self.assertIn("zz.yaml:5: invalid rate limit unit 'fortnight'", d.log_text())
        self.assertEqual(self.take(d, "domain=web remote_address=r")[:2], (True, 0))
        self.assertEqual(self.take(d, "domain=zz k=v")[:2], (True, NO_LIMIT))
        # fixed, and web's file gone: the new rules
        write(os.path.join(conf, "zz.yaml"), "domain: zz\ndescriptors:\n  - key: k\n    rate_limit:\n"
                                             "      unit: hour\n      requests_per_unit: 1\n")
        os.unlink(os.path.join(conf, "web.yml"))
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        seq, _ = d.wait_note("RELOADING=1", after=before)
        d.wait_note("READY=1", after=seq, what="READY=1 after RELOADING=1")
        self.assertEqual(self.take(d, "domain=zz k=v")[:2], (True, 0))
        self.assertEqual(self.take(d, "domain=zz k=v")[:2], (False, 0))
        self.assertEqual(self.take(d, "domain=web remote_address=r")[:2], (True, NO_LIMIT))
        self.assertEqual(d.stop(), 0)

    def run_divvyd(self, *args):
        return subprocess.run([harness.divvyd_path(), *args], capture_output=True, text=True,
                              timeout=60 * harness.TIMEOUT_SCALE)

    def test_check_and_dump(self):
        conf = self.config_dir({"api.yaml": API, "web.yml": WEB, "notes.txt": "not read"})
        p = self.run_divvyd("--check-config", conf)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(p.stdout.startswith(conf + ": OK, "), p.stdout)
        p = self.run_divvyd("--dump-config", conf)
        self.assertEqual(p.returncode, 0, p.stderr)
        dumped = json.loads(p.stdout)
        self.assertEqual(dumped["default"]["creditLimit"], NO_LIMIT)
        self.assertIn({"operation": {"domain": "web", "remote_address": "*"}, "creditLimit": 1,
                       "resetSeconds": 7 * DAY, "window": "aligned", "actorField": "remote_address",
                       "matchKeys": "exact", "comment": "web.remote_address"}, dumped["overrides"])
        # the dump is a JSON configuration of the same rules
        path = os.path.join(os.path.dirname(conf), "dump.json")
        write(path, p.stdout)
        again = self.run_divvyd("--dump-config", path)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(again.stdout, p.stdout)
        # one domain in two files: both named, nothing loads
        write(os.path.join(conf, "web2.yaml"), WEB)
        p = self.run_divvyd("--check-config", conf)
        self.assertEqual(p.returncode, 1)
        self.assertIn("%s/web2.yaml:1: duplicate domain 'web': web.yml configures it too" % conf, p.stderr)

    def test_messages_name_the_file(self):
        # a rule's line is a line of the file it came from, in every message about it
        conf = self.config_dir({"api.yaml": API, "web.yml": WEB})
        p = self.run_divvyd("--check-config", conf)
        self.assertEqual(p.returncode, 0, p.stderr)
        rules = p.stdout.splitlines()[1:]
        self.assertTrue(rules)
        for line in rules:
            self.assertRegex(line, r"^%s/(api\.yaml|web\.yml):\d+: rule " % re.escape(conf))
        self.assertIn("%s/web.yml:3: rule [domain=web remote_address=*]: " % conf, p.stdout)
        self.assertIn("%s/api.yaml:8: rule [client=mobile domain=api user=*]: " % conf, p.stdout)
        p = self.run_divvyd("--check-config", "--compat=divvy", conf)
        self.assertEqual(p.returncode, 1)
        self.assertIn("%s/web.yml:3: rule [domain=web remote_address=*] is not divvy-compatible" % conf,
                      p.stderr)
        self.assertIn("%s: rule [default] is not divvy-compatible" % conf, p.stderr)  # the directory's
        # a label of another file: both files named
        write(os.path.join(conf, "web.yml"), WEB.replace("requests_per_unit: 1",
                                                         "requests_per_unit: 1\n      name: per-user"))
        p = self.run_divvyd("--check-config", conf)
        self.assertEqual(p.returncode, 1)
        self.assertIn('%s/web.yml:7: rule [domain=web remote_address=*] has the label "per-user" of rule '
                      '[domain=api user=*] (%s/api.yaml:3): labels must be unique' % (conf, conf), p.stderr)


if __name__ == "__main__":
    harness.main()
