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
send the same requests on keys suffixed `_local`, with the same expectations: replayed too,
and testBasicBaseConfig once more with the counters in Redis (--store), redis-server on the
same controlled clock (fakeclock.c preloaded into it: the store's script reads Redis's TIME).
What cannot apply is listed in tests/data/envoy-ratelimit/README.md and docs/envoy.md.

Docs: docs/envoy.md's YAML snippets parse, and its rules file decides the descriptors its table
says Envoy's route actions send.

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
import redisfix  # noqa: E402

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


class EnvoyDaemon(harness.DaemonTestCase):
    """divvyd on a directory of YAML files, its gRPC listener, the controlled clock."""

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

    def start(self, configs=CONFIGS, args=()):
        """A daemon on a config directory of its own holding configs (copies of the fixtures:
        names in config/, or {name: text}), its gRPC listener on a Unix socket, on the
        controlled clock; and a client."""
        self.clock.set(BASE_NS)
        tmp = harness.make_tmpdir()
        self.addCleanup(shutil.rmtree, tmp, True)
        self.config_dir = os.path.join(tmp, "config")
        os.mkdir(self.config_dir)
        for c in configs:
            if isinstance(configs, dict):
                with open(os.path.join(self.config_dir, c), "w") as f:
                    f.write(configs[c])
            else:
                shutil.copyfile(data_dir("config", c), os.path.join(self.config_dir, c))
        sock = os.path.join(tmp, "grpc.sock")
        d = self.start_daemon(self.config_dir, tmpdir=tmp, env=self.clock.env(),
                              args=["--grpc", "unix:" + sock] + list(args))
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


class Replay(EnvoyDaemon):
    def replay(self, case, rename=lambda s: s, args=()):
        rows = [r for r in self.rows if r.case == case]
        self.assertTrue(rows, case)
        d, c = self.start(args=args)
        for n, r in enumerate(rows, 1):
            self.clock.set(BASE_NS + int(round(r.clock * 10**9)))
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

    def test_basic_base_config_redis_store(self):
        # envoyproxy/ratelimit's own backend: the counters in Redis (--store), whose clock, the
        # script's TIME, is the controlled one too (fakeclock.c preloaded into redis-server)
        why = redisfix.missing()
        if why:
            self.skipTest(why)
        r = redisfix.RedisServer()
        r.env = self.clock.env()
        with r:
            self.replay("testBasicBaseConfig", args=["--store=%s" % r.url(), "--backend-timeout=5000"])

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


class Docs(EnvoyDaemon):
    """docs/envoy.md's configurations: every YAML snippet parses (python3-yaml); its rules file
    loads, and decides the descriptors its table says Envoy's actions send."""

    def blocks(self):
        return yaml_blocks(os.path.join(harness.top_srcdir(), "docs", "envoy.md"))

    def test_yaml_snippets_parse(self):
        import yaml
        blocks = self.blocks()
        self.assertGreaterEqual(len(blocks), 4)
        for line, text in blocks:
            docs = list(yaml.safe_load_all(text))
            self.assertTrue(docs and all(isinstance(d, dict) for d in docs),
                            "docs/envoy.md:%d: %r" % (line, docs))

    def test_rules_snippet(self):
        rules = [text for _, text in self.blocks() if text.startswith("# /etc/divvyd/ratelimit/")]
        self.assertEqual(len(rules), 1)
        d, c = self.start({"edge.yaml": rules[0]})
        self.clock.set(BASE_NS + 30 * 10**9 + 250 * 10**6)
        addr = [("remote_address", "203.0.113.7")]
        key = [("generic_key", "api"), ("api_key", "k-123")]
        for remaining in (9, 8):
            resp = c.should_rate_limit(grpcfix.request("edge", [addr, key], 1))
            self.assertEqual(grpcfix.statuses_text(resp), ["OK 10/SECOND %d 1" % remaining,
                                                           "OK 1000/MINUTE %d 30" % (remaining + 990)])
        # a key without the api_key entry (no header): not a descriptor the file limits
        resp = c.should_rate_limit(grpcfix.request("edge", [[("generic_key", "api")]], 1))
        self.assertEqual(grpcfix.statuses_text(resp), ["OK"])


if __name__ == "__main__":
    if grpcfix.missing():
        harness.skip_all(grpcfix.missing())
    harness.main()
