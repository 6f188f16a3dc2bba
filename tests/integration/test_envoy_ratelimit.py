#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""envoyproxy/ratelimit's own integration tests replayed against divvyd (issue #34): every
request of tests/data/envoy-ratelimit/cases.tsv sent by a real gRPC client (python3-grpcio,
messages generated from proto/) to divvyd's gRPC listener, divvyd loading the YAML files
envoyproxy/ratelimit's tests load (tests/data/envoy-ratelimit/config/), and the response
compared with the table's: overall_code, and per descriptor code, current_limit,
limit_remaining and duration_until_reset. The clock is controlled (fakeclock.c preloaded), so
the loops the Go tests run within "one minute" fall into one window, and each reset is exact.

The Go tests' `_local` variants (envoyproxy/ratelimit with a local cache of over-limit keys)
send the same requests on keys suffixed `_local`, with the same expectations: replayed too.
What cannot apply is listed in tests/data/envoy-ratelimit/README.md and docs/envoy.md.

Run one test:  tests/integration/test_envoy_ratelimit.py Replay.test_basic_base_config
"""

import collections
import os
import re
import shutil
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import grpcfix  # noqa: E402

BASE_NS = 1764028800 * 10**9  # 2025-11-25T00:00:00Z, the table's clock 0
CONFIGS = ("basic.yaml", "another.yaml", "share_threshold.yaml")

Row = collections.namedtuple("Row", "case clock domain descriptors hits overall statuses")


def data_dir(*parts):
    return harness.data_path(os.path.join("envoy-ratelimit", *parts))


def read_table():
    rows = []
    with open(data_dir("cases.tsv")) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            case, clock, domain, descs, hits, overall, statuses = line.split("\t")
            rows.append(Row(case, float(clock), domain, descs, hits, overall, statuses))
    return rows


def local_keys(text):
    """The Go tests' local-cache variant: every descriptor key suffixed _local."""
    return re.sub(r"(^|[;,])([^=;,]+)=", lambda m: "%s%s_local=" % (m.group(1), m.group(2)), text)


class Replay(harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        why = grpcfix.missing()
        if why:
            raise harness.HarnessError(why)
        grpcfix.load()
        cls.tmp = harness.make_tmpdir()
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.clock = harness.FakeClock(cls.tmp)
        cls.addClassCleanup(cls.clock.close)
        cls.rows = read_table()

    def start(self, name, configs=CONFIGS):
        """A daemon on a config directory of its own holding configs (copies of the fixtures),
        its gRPC listener on a Unix socket, on the controlled clock; and a client."""
        self.clock.set_ns(BASE_NS)
        tmp = harness.make_tmpdir()
        self.addCleanup(shutil.rmtree, tmp, True)
        self.config_dir = os.path.join(tmp, "config")
        os.mkdir(self.config_dir)
        for c in configs:
            shutil.copyfile(data_dir("config", c), os.path.join(self.config_dir, c))
        sock = os.path.join(tmp, "grpc.sock")
        d = self.start_daemon(self.config_dir, tmpdir=tmp, env=self.clock.env(),
                              args=["--grpc", "unix:" + sock])
        c = grpcfix.Client("unix:" + sock)
        self.addCleanup(c.close)
        return d, c

    def reload(self, d):
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        seq, _ = d.wait_note("RELOADING=1", after=before)
        seq, _ = d.wait_note("READY=1", after=seq, what="READY=1 after RELOADING=1")
        _, status = d.wait_note(re.compile(r"^STATUS="), after=seq, what="STATUS after reload")
        self.assertNotIn("failed", status)

    def replay(self, case, rename=lambda s: s):
        rows = [r for r in self.rows if r.case == case]
        self.assertTrue(rows, case)
        d, c = self.start(case)
        for n, r in enumerate(rows, 1):
            self.clock.set_ns(BASE_NS + int(round(r.clock * 10**9)))
            if r.domain.startswith("!"):
                verb, name = r.domain[1:].split(" ")
                path = os.path.join(self.config_dir, name)
                if verb == "add":
                    shutil.copyfile(data_dir(name), path + ".tmp")
                    os.replace(path + ".tmp", path)
                else:
                    os.unlink(path)
                self.reload(d)
                continue
            descs = rename(r.descriptors)
            resp = c.should_rate_limit(grpcfix.request(r.domain, grpcfix.parse_descriptors(descs),
                                                       int(r.hits)))
            what = "%s row %d: %s %s at %s" % (case, n, r.domain, descs, r.clock)
            self.assertEqual((grpcfix.code_name(resp.overall_code), grpcfix.statuses_text(resp)),
                             (r.overall, r.statuses.split(";")), what)
            self.assertEqual(list(resp.response_headers_to_add), [], what)
        return d

    def test_basic_base_config(self):
        self.replay("testBasicBaseConfig")

    def test_basic_base_config_local_keys(self):
        self.replay("testBasicBaseConfig", local_keys)

    def test_config_reload(self):
        self.replay("testConfigReload")

    def test_share_threshold(self):
        self.replay("testShareThreshold")


def yaml_blocks(path):
    """[(line, text)] of every ```yaml block of a Markdown file."""
    out, block, start = [], None, 0
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if block is None and line.strip() == "```yaml":
                block, start = [], n + 1
            elif block is not None and line.strip() == "```":
                out.append((start, "".join(block)))
                block = None
            elif block is not None:
                block.append(line)
    return out


class Docs(harness.DaemonTestCase):
    """docs/envoy.md's configurations: every YAML snippet parses (python3-yaml); the rules file
    it shows is accepted by divvyd --check-config."""

    def test_yaml_snippets_parse(self):
        import yaml
        blocks = yaml_blocks(os.path.join(harness.top_srcdir(), "docs", "envoy.md"))
        self.assertGreaterEqual(len(blocks), 4)
        for line, text in blocks:
            docs = list(yaml.safe_load_all(text))
            self.assertTrue(docs and all(isinstance(d, dict) for d in docs),
                            "docs/envoy.md:%d: %r" % (line, docs))

    def test_rules_snippet_checks(self):
        blocks = yaml_blocks(os.path.join(harness.top_srcdir(), "docs", "envoy.md"))
        rules = [text for _, text in blocks if text.startswith("# /etc/divvyd/")]
        self.assertEqual(len(rules), 1)
        tmp = harness.make_tmpdir()
        self.addCleanup(shutil.rmtree, tmp, True)
        path = os.path.join(tmp, "edge.yaml")
        with open(path, "w") as f:
            f.write(rules[0])
        p = subprocess.run([harness.divvyd_path(), "--check-config", path], capture_output=True,
                           text=True, timeout=harness.IO_TIMEOUT)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


if __name__ == "__main__":
    if grpcfix.missing():
        harness.skip_all(grpcfix.missing())
    harness.main()
