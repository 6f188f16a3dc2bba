#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Metrics: statsd over UDP and TCP, the Prometheus endpoint, and a dead statsd.

statsd datagrams are captured on local sockets; after a known sequence of requests the
aggregated counters must add up to exactly the expected values, with divvy's names and
prefix rule. Waits are bounded and only wait for values to arrive (no timing assertions).

At the edges a bug hunt found broken: the statsd sender against a collector that accepts and
closes at once (a proxy in front of a dead statsd), and the Prometheus endpoint against
clients that send it garbage and an invalid --http-address.
"""

import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import data_path  # noqa: E402

PAYLOAD_MAX = 1432  # bytes: STATSD_PAYLOAD_MAX
WAIT = harness.IO_TIMEOUT  # seconds: how long values may take to arrive

CONFIG = """\
[path=/cookies]
creditLimit = 2
resetSeconds = 600
label = cookies

[path=/special]
creditLimit = 1
resetSeconds = 600
label = special
matchPolicy = canary

[path=/open]
creditLimit = 5
resetSeconds = 0

[default]
creditLimit = 0
resetSeconds = 0
"""

# What play() does, in divvy's statsd names (without prefix):
#   3x /cookies: accepted, accepted, rejected (label cookies)
#   2x /special: canary accepted then rejected (label special); each answered by the
#      default rule: rejected, unlabelled
#   1x /open: accepted (always-allow, unlabelled)
#   1x BOGUS: ERR unknown-command
EXPECTED_COUNTERS = {
    "hit.accepted": 3,
    "hit.rejected": 3,
    "hit.canary-accepted": 1,
    "hit.canary-rejected": 1,
    "hit.accepted.cookies": 2,
    "hit.rejected.cookies": 1,
    "hit.canary-accepted.special": 1,
    "hit.canary-rejected.special": 1,
    "error.unknown-command": 1,
}
OK_HITS = 6  # HITs answered OK (timed)


def write_config(d):
    path = os.path.join(d.tmpdir, "metrics.ini")
    with open(path, "w") as f:
        f.write(CONFIG)
    return path


def play(d):
    with d.connect("tcp") as c:
        replies = [c.request(l) for l in ["HIT path=/cookies"] * 3 + ["HIT path=/special"] * 2 +
                   ["HIT path=/open"]]
    assert replies == ["OK true 1 600", "OK true 0 600", "OK false 0 600",
                       "OK false 0 -1", "OK false 0 -1", "OK true 5 0"], replies
    with d.connect("unix") as c:
        reply = c.request("BOGUS")
        assert reply.startswith("ERR unknown-command"), reply


def parse_statsd(lines, prefix):
    """Sums counters by name (prefix removed); returns (counters, timers, gauges, others)."""
    counters, timers, gauges, others = {}, [], [], []
    for line in lines:
        m = re.match(r"^(.+):([0-9.]+)\|(c|ms|g)(\|@([0-9.]+))?$", line)
        if not m or not m.group(1).startswith(prefix):
            others.append(line)
            continue
        name, value, kind = m.group(1)[len(prefix):], m.group(2), m.group(3)
        if kind == "c":
            counters[name] = counters.get(name, 0) + int(value)
        elif kind == "ms":
            timers.append((name, float(value), m.group(5)))
        else:
            gauges.append((name, int(value)))
    return counters, timers, gauges, others


class UdpSink:
    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.datagrams = []

    def close(self):
        self.sock.close()

    def receive(self, timeout):
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return False
        self.datagrams.append(data.decode())
        return True

    def lines(self):
        return [l for d in self.datagrams for l in d.split("\n")]


class TcpSink:
    def __init__(self):
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(4)
        self.port = self.listener.getsockname()[1]
        self.conn = None
        self.data = b""
        self.connections = 0

    def close(self):
        if self.conn:
            self.conn.close()
        self.listener.close()

    def drop_connection(self):
        self.conn.close()
        self.conn = None

    def receive(self, timeout):
        if self.conn is None:
            self.listener.settimeout(timeout)
            try:
                self.conn, _ = self.listener.accept()
            except socket.timeout:
                return False
            self.connections += 1
        self.conn.settimeout(timeout)
        try:
            data = self.conn.recv(65536)
        except socket.timeout:
            return False
        if not data:
            self.conn.close()
            self.conn = None
            return False
        self.data += data
        return True

    def lines(self):
        text = self.data.decode()
        return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")[:-1]


def collect_until(sink, prefix, want, timeout=WAIT):
    """Receives until the summed counters include want (name -> value). Returns the parse."""
    deadline = time.monotonic() + timeout
    while True:
        parsed = parse_statsd(sink.lines(), prefix)
        if all(parsed[0].get(k, 0) >= v for k, v in want.items()):
            return parsed
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("statsd never reached %r; got %r" % (want, parsed[0]))
        sink.receive(min(left, 0.5))


def wait_for_sample(port, key, predicate, timeout=WAIT):
    deadline = time.monotonic() + timeout
    while True:
        s = harness.prometheus_samples(harness.http_get(port)[2])
        if key in s and predicate(s[key]):
            return s
        if time.monotonic() > deadline:
            raise AssertionError("%s never satisfied the condition; last %r" % (key, s.get(key)))
        time.sleep(0.05)


# The store's gauges (version 2): sent with every flush once the store's stats are published.
STORE_GAUGES = {"store.counters", "store.size_bytes", "store.memory_bytes", "journal.bytes",
                "checkpoint.age_ms", "checkpoint.duration_ms", "checkpoint.failures"}


class StatsdTests(harness.DaemonTestCase):
    def run_sequence_and_check(self, sink, prefix, env, args=()):
        d = self.new_daemon(None, env=env, args=["--statsd-interval=50"] + list(args))
        d.config = write_config(d)
        d.start()
        play(d)
        counters, timers, gauges, others = collect_until(sink, prefix, EXPECTED_COUNTERS)
        # Exactly these counters, no others (nothing counted twice, nothing unprefixed).
        self.assertEqual(counters, EXPECTED_COUNTERS)
        self.assertEqual(others, [])
        # The hit timer: one sample per batch at most, each carrying its rate when sampled.
        self.assertTrue(timers, "no hit timer")
        for name, value, rate in timers:
            self.assertEqual(name, "hit")
            self.assertGreaterEqual(value, 0.0)
            if rate is not None:
                self.assertTrue(0 < float(rate) < 1, rate)
        # Gauges: the connections, and the store's (checkpoint health) once the manager
        # published them; exactly these names.
        self.assertTrue(gauges and all(name in STORE_GAUGES or name == "connections"
                                       for name, _ in gauges), gauges)
        self.assertIn("connections", [name for name, _ in gauges])
        return d

    def test_udp_names_prefix_counts(self):
        sink = UdpSink()
        self.addCleanup(sink.close)
        self.run_sequence_and_check(sink, "divvy.", {
            "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(sink.port), "STATSD_PREFIX": "divvy"})
        for dgram in sink.datagrams:
            self.assertLessEqual(len(dgram.encode()), PAYLOAD_MAX)
            self.assertFalse(dgram.endswith("\n"))

    def test_udp_prefix_with_dot_and_flags(self):
        # A prefix ending in "." gets no second dot; flags instead of the environment.
        sink = UdpSink()
        self.addCleanup(sink.close)
        self.run_sequence_and_check(sink, "svc.divvy.", {}, args=[
            "--statsd-host=127.0.0.1", "--statsd-port=%d" % sink.port, "--statsd-prefix=svc.divvy."])

    def test_udp_no_prefix(self):
        sink = UdpSink()
        self.addCleanup(sink.close)
        self.run_sequence_and_check(sink, "", {"STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(sink.port)})

    def test_udp_aggregation(self):
        # 500 pipelined HITs become a handful of counter lines, not 500.
        sink = UdpSink()
        self.addCleanup(sink.close)
        d = self.new_daemon(None, env={"STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(sink.port)},
                            args=["--statsd-interval=200"])
        d.config = write_config(d)
        d.start()
        with d.connect("tcp") as c:
            replies = c.pipeline(["HIT path=/open"] * 500)
        self.assertEqual(replies, ["OK true 5 0"] * 500)
        counters, timers, _, _ = collect_until(sink, "", {"hit.accepted": 500})
        self.assertEqual(counters, {"hit.accepted": 500})
        n_lines = sum(1 for l in sink.lines() if l.startswith("hit.accepted:"))
        self.assertLess(n_lines, 50, "not aggregated: %d lines for 500 hits" % n_lines)
        self.assertLessEqual(len(timers), 32 * len(sink.datagrams))

    def test_tcp_and_reconnect(self):
        sink = TcpSink()
        self.addCleanup(sink.close)
        d = self.run_sequence_and_check(sink, "divvy.", {
            "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(sink.port), "STATSD_PREFIX": "divvy",
            "STATSD_USE_TCP": "1"})
        self.assertTrue(sink.data.endswith(b"\n"))
        # The collector goes away: divvyd reconnects (with backoff) and keeps counting.
        sink.drop_connection()
        before = dict(parse_statsd(sink.lines(), "divvy.")[0])
        deadline = time.monotonic() + WAIT
        n = 0
        while sink.connections < 2 and time.monotonic() < deadline:
            self.assertEqual(d.request("HIT path=/open"), "OK true 5 0")
            n += 1
            sink.receive(0.2)
        self.assertEqual(sink.connections, 2, "no reconnect")
        self.assertEqual(d.request("HIT path=/open"), "OK true 5 0")
        collect_until(sink, "divvy.", {"hit.accepted": before["hit.accepted"] + 1})


class PrometheusTests(harness.DaemonTestCase):
    def start(self, env=None, args=()):
        port = harness.free_tcp_port()
        e = {"HTTP_SERVICE_PORT": str(port), "PROMETHEUS_METRICS_PATH": "/metrics"}
        e.update(env or {})
        d = self.new_daemon(None, env=e, args=["--sweep-interval=50"] + list(args))
        d.config = write_config(d)
        d.start()
        return d, port

    def test_every_metric(self):
        d, port = self.start()
        play(d)
        # Two open connections, each having been served (so the server has them).
        c1, c2 = d.connect("tcp"), d.connect("unix")
        self.addCleanup(c1.close)
        self.addCleanup(c2.close)
        self.assertEqual(c1.request("HIT path=/open"), "OK true 5 0")
        self.assertEqual(c2.request("HIT path=/open"), "OK true 5 0")

        # Store stats come with the sweeper's runs; wait for them.
        wait_for_sample(port, "divvyd_store_counters", lambda v: v == 2)
        status, ctype, text = harness.http_get(port)
        self.assertEqual(status, 200)
        self.assertTrue(ctype.startswith("text/plain; version=0.0.4"), ctype)
        s = harness.prometheus_samples(text)
        expect = {
            'divvy_tcp_connections_total': 2,
            'divvy_hits_total{status="accepted",rule_label="cookies"}': 2,
            'divvy_hits_total{status="rejected",rule_label="cookies"}': 1,
            'divvy_hits_total{status="canary-accepted",rule_label="special"}': 1,
            'divvy_hits_total{status="canary-rejected",rule_label="special"}': 1,
            'divvy_hits_total{status="accepted",rule_label=""}': 3,
            'divvy_hits_total{status="rejected",rule_label=""}': 2,
            'divvy_hits_total{status="canary-accepted",rule_label=""}': 0,
            'divvy_hits_total{status="canary-rejected",rule_label=""}': 0,
            'divvy_errors_total{code="unknown-command"}': 1,
            'divvy_errors_total{code="unknown"}': 0,
            'divvy_hit_duration_seconds_count': OK_HITS + 2,
            'divvy_hit_duration_seconds_bucket{le="+Inf"}': OK_HITS + 2,
            'divvyd_store_counters': 2,
            'divvyd_sweeper_deleted_total': 0,
            'divvyd_reloads_total{result="ok"}': 0,
            'divvyd_reloads_total{result="failed"}': 0,
            'divvyd_statsd_dropped_total': 0,
        }
        for key, value in expect.items():
            self.assertIn(key, s)
            self.assertEqual(s[key], value, key)
        # A labelled series appears with its first hit only (like divvy).
        self.assertNotIn('divvy_hits_total{status="canary-accepted",rule_label="cookies"}', s)
        self.assertGreater(s["divvyd_store_size_bytes"], 0)
        version = [k for k in s if k.startswith("divvyd_build_info{")]
        self.assertEqual(len(version), 1)
        self.assertRegex(version[0], r'^divvyd_build_info\{version="[0-9][^"]*"\}$')
        self.assertEqual(s[version[0]], 1)
        # Histograms: cumulative buckets, the sub-millisecond ones included.
        buckets = [(k, v) for k, v in s.items() if k.startswith("divvy_hit_duration_seconds_bucket")]
        les = [re.search(r'le="([^"]+)"', k).group(1) for k, _ in buckets]
        self.assertEqual(les, ["1e-05", "2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005", "0.001",
                               "0.002", "0.005", "0.01", "0.1", "0.5", "+Inf"])
        values = [v for _, v in buckets]
        self.assertEqual(values, sorted(values))
        batch = [v for k, v in s.items() if k.startswith("divvyd_batch_size_bucket")]
        self.assertEqual(batch, sorted(batch))
        self.assertEqual(s['divvyd_batch_size_bucket{le="+Inf"}'], s["divvyd_batch_size_count"])
        # 6 sequence batches at least (one request per round trip), plus the ERR one and c1/c2.
        self.assertGreaterEqual(s["divvyd_batch_size_count"], 9)
        # Every family is announced.
        for family in ["divvy_tcp_connections_total gauge", "divvy_hit_duration_seconds histogram",
                       "divvy_hits_total counter", "divvy_errors_total counter",
                       "divvyd_store_size_bytes gauge", "divvyd_store_counters gauge",
                       "divvyd_batch_size histogram", "divvyd_sweeper_deleted_total counter",
                       "divvyd_reloads_total counter", "divvyd_statsd_dropped_total counter",
                       "divvyd_build_info gauge"]:
            self.assertIn("# TYPE " + family + "\n", text)
            self.assertIn("# HELP " + family.split()[0] + " ", text)

    def test_journal_syncs(self):
        # With --sync=always each allowed HIT answered alone (one round trip each) waited for a
        # sync of its own: the syncs are counted, with the time they took.
        d, port = self.start(args=["--sync=always"])
        c = d.connect("tcp")
        self.addCleanup(c.close)
        before = wait_for_sample(port, "divvyd_journal_syncs_total", lambda v: v >= 0)
        replies = [c.request("HIT path=/cookies ip=10.0.0.%d" % i) for i in range(4)]
        allowed = sum(r.startswith("OK true") for r in replies)
        self.assertGreaterEqual(allowed, 2, replies)
        s = wait_for_sample(port, "divvyd_journal_syncs_total",
                            lambda v: v >= before["divvyd_journal_syncs_total"] + allowed)
        self.assertGreaterEqual(s["divvyd_journal_sync_seconds_total"],
                                before["divvyd_journal_sync_seconds_total"])
        for family in ["divvyd_journal_syncs_total counter", "divvyd_journal_sync_seconds_total counter"]:
            self.assertIn("# TYPE " + family + "\n", harness.http_get(port)[2])

    def test_reloads_and_paths(self):
        d, port = self.start()
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        seq, _ = d.wait_note("RELOADING=1", after=before)
        d.wait_note("READY=1", after=seq)
        with open(d.config, "w") as f:
            f.write("[default\n")
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        seq, _ = d.wait_note("RELOADING=1", after=before)
        d.wait_note("READY=1", after=seq)
        s = harness.prometheus_samples(harness.http_get(port)[2])
        self.assertEqual(s['divvyd_reloads_total{result="ok"}'], 1)
        self.assertEqual(s['divvyd_reloads_total{result="failed"}'], 1)

        status, _, body = harness.http_get(port, "/healthz")
        self.assertEqual((status, body), (200, "ok\n"))
        for path in ["/", "/metricsx", "/metrics/"]:
            with self.assertRaises(urllib.error.HTTPError) as cm:
                harness.http_get(port, path)
            self.assertEqual(cm.exception.code, 404, path)

    def test_flags_and_custom_path(self):
        port = harness.free_tcp_port()
        d = self.new_daemon(None, args=["--http-port=%d" % port, "--metrics-path=/custom/m"])
        d.config = write_config(d)
        d.start()
        self.assertEqual(d.request("HIT path=/open"), "OK true 5 0")
        s = harness.prometheus_samples(harness.http_get(port, "/custom/m")[2])
        self.assertEqual(s['divvy_hits_total{status="accepted",rule_label=""}'], 1)
        with self.assertRaises(urllib.error.HTTPError) as cm:
            harness.http_get(port, "/metrics")
        self.assertEqual(cm.exception.code, 404)
        # Bound to 127.0.0.1 by default: the log says where.
        self.assertIn("http://127.0.0.1:%d/custom/m" % port, d.log_text())

    def test_busy_port_fails_start(self):
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen(1)
            d = self.new_daemon(None, env={"HTTP_SERVICE_PORT": str(busy.getsockname()[1])})
            d.config = write_config(d)
            d.start(wait_ready=False)
            self.assertEqual(d.wait_exit(), 1)
            self.assertIn("HTTP", d.log_text())


class DeadStatsdTests(harness.DaemonTestCase):
    N = 3000

    def serve_all(self, d):
        with d.connect("tcp") as c:
            for i in range(0, self.N, 500):
                self.assertEqual(c.pipeline(["HIT path=/open"] * 500), ["OK true 5 0"] * 500)

    def dead_statsd(self, tcp):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            dead = s.getsockname()[1]  # closed once we leave: nothing listens there
        http = harness.free_tcp_port()
        env = {"STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(dead), "HTTP_SERVICE_PORT": str(http),
               "PROMETHEUS_METRICS_PATH": "/metrics"}
        if tcp:
            env["STATSD_USE_TCP"] = "yes"
        d = self.new_daemon(None, env=env, args=["--statsd-interval=10"])
        d.config = write_config(d)
        d.start()
        # Every request is answered while statsd is refused; drops are counted.
        self.serve_all(d)
        deadline = time.monotonic() + WAIT
        while True:
            self.assertEqual(d.request("HIT path=/open"), "OK true 5 0")
            s = harness.prometheus_samples(harness.http_get(http)[2])
            if s["divvyd_statsd_dropped_total"] > 0:
                break
            self.assertLess(time.monotonic(), deadline, "no statsd drops counted")
            time.sleep(0.02)
        self.assertGreaterEqual(s['divvy_hits_total{status="accepted",rule_label=""}'], self.N + 1)

    def test_udp_closed_port(self):
        self.dead_statsd(tcp=False)

    def test_tcp_refused(self):
        self.dead_statsd(tcp=True)


CLOSING_WAIT = 10 * harness.TIMEOUT_SCALE  # s: bound of every wait below (never an assertion)


class ClosingCollector:
    """A TCP "statsd" that accepts every connection and closes it at once."""

    def __init__(self):
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        deadline = time.monotonic() + 4 * CLOSING_WAIT
        while not self.done.is_set() and time.monotonic() < deadline:
            try:
                c, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            self.accepted += 1
            c.close()

    def close(self):
        self.done.set()
        self.thread.join(CLOSING_WAIT)
        self.listener.close()


class StatsdFlapping(harness.DaemonTestCase):
    def test_backoff_grows(self):
        # docs/metrics.md "statsd": a lost TCP connection is re-established with exponential backoff
        # (100 ms doubling to 30 s). A collector that accepts and closes at once made every
        # connection count as a working one, reset the backoff to 100 ms and logged a warning:
        # ten reconnects and ten warnings a second, forever.
        sink = ClosingCollector()
        self.addCleanup(sink.close)
        d = self.start_daemon(data_path("itest.ini"), args=[
            "--statsd-host=127.0.0.1", "--statsd-port=%d" % sink.port, "--statsd-tcp"])
        retry = re.compile(r"statsd connection to 127\.0\.0\.1:%d failed, retrying in (\d+) ms" % sink.port)
        deadline = time.monotonic() + CLOSING_WAIT
        delays = []
        while len(delays) < 5 and time.monotonic() < deadline and d.running():
            d.drain_notes(0.1)
            delays = [int(x) for x in retry.findall(d.log_text())]
        self.assertGreaterEqual(len(delays), 5, d.log_tail())
        self.assertEqual(delays[:5], [100, 200, 400, 800, 1600], d.log_tail())
        self.assertEqual(d.request("HIT path=/open"), "OK true 5 0")
        self.assertEqual(d.stop(), 0)


class HttpGarbage(harness.DaemonTestCase):
    def test_client_garbage_is_not_logged_as_warnings(self):
        # docs/running.md "Running divvyd", Logging: client misbehaviour is logged at debug level only.
        # libmicrohttpd's messages about a client's bad request (400, 431, 505, a request cut
        # off) were all warnings: anyone who can reach the metrics port could write a line to
        # the log per connection.
        port = harness.free_tcp_port()
        d = self.start_daemon(data_path("itest.ini"), args=["--http-port=%d" % port])
        bad = [b"GET /metrics HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n",  # 400
               b"GET /metrics\r\n\r\n",  # 400: no version
               b"GET /metrics HTTP/2.0\r\n\r\n",  # 505
               b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 100000 + b"\r\n\r\n"]  # 431
        for i in range(20):
            with socket.create_connection(("127.0.0.1", port), timeout=harness.IO_TIMEOUT) as s:
                try:
                    s.sendall(bad[i % len(bad)])
                    s.recv(4096)  # the error page, sent after the message was logged
                except OSError:
                    pass  # closed on us: fine
        for i in range(5):  # requests cut off: the client goes away mid-header
            with socket.create_connection(("127.0.0.1", port), timeout=harness.IO_TIMEOUT) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        # The endpoint still answers (bounded wait: cut-off connections are noticed on its
        # own schedule), and so does the request path.
        status = None
        for _ in range(int(50 * harness.TIMEOUT_SCALE)):
            try:
                status = harness.http_get(port, "/healthz")[0]
                break
            except OSError:
                d.drain_notes(0.1)
        self.assertEqual(status, 200)
        self.assertEqual(d.request("HIT path=/open"), "OK true 5 0")
        self.assertEqual(d.stop(), 0)
        warnings = [l for l in d.log_text().splitlines() if l.startswith("<4>HTTP")]
        self.assertEqual(warnings, [], d.log_tail())

    def test_bad_http_address_is_a_usage_error(self):
        # divvyd(8): an invalid option value exits 2 before anything starts. --http-address was
        # only checked when the endpoint started, which exited 1.
        for bad in ("[::1]", "localhost", "127.0.0.256", ""):
            d = self.new_daemon(data_path("itest.ini"), notify=False,
                                args=["--http-port=%d" % harness.free_tcp_port(), "--http-address=" + bad])
            d.start(wait_ready=False)
            self.assertEqual(d.wait_exit(), 2, bad)
            self.assertIn("invalid value for --http-address", d.log_text(), bad)


if __name__ == "__main__":
    harness.main()
