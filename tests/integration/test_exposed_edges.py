#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What divvyd exposes besides the request path, at the edges a bug hunt found broken: the
statsd sender against a collector that accepts and closes at once (a proxy in front of a
dead statsd), and the Prometheus endpoint against clients that send it garbage. The common
cases are in test_metrics.py, test_admin.py, test_lifecycle.py and test_faults.py.

Run one test:  tests/integration/test_exposed_edges.py StatsdFlapping.test_backoff_grows
"""

import os
import re
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import data_path  # noqa: E402

WAIT = 10 * harness.TIMEOUT_SCALE  # s: bound of every wait below (never an assertion)


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
        deadline = time.monotonic() + 4 * WAIT
        while not self.done.is_set() and time.monotonic() < deadline:
            try:
                c, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            self.accepted += 1
            c.close()

    def close(self):
        self.done.set()
        self.thread.join(WAIT)
        self.listener.close()


class StatsdFlapping(harness.DaemonTestCase):
    def test_backoff_grows(self):
        # README "statsd": a lost TCP connection is re-established with exponential backoff
        # (100 ms doubling to 30 s). A collector that accepts and closes at once made every
        # connection count as a working one, reset the backoff to 100 ms and logged a warning:
        # ten reconnects and ten warnings a second, forever.
        sink = ClosingCollector()
        self.addCleanup(sink.close)
        d = self.start_daemon(data_path("itest.ini"), args=[
            "--statsd-host=127.0.0.1", "--statsd-port=%d" % sink.port, "--statsd-tcp"])
        retry = re.compile(r"statsd connection to 127\.0\.0\.1:%d failed, retrying in (\d+) ms" % sink.port)
        deadline = time.monotonic() + WAIT
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
        # README "Running divvyd", Logging: client misbehaviour is logged at debug level only.
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
        # README: an invalid option value exits 2 before anything starts. --http-address was
        # only checked when the endpoint started, which exited 1.
        for bad in ("[::1]", "localhost", "127.0.0.256", ""):
            d = self.new_daemon(data_path("itest.ini"), notify=False,
                                args=["--http-port=%d" % harness.free_tcp_port(), "--http-address=" + bad])
            d.start(wait_ready=False)
            self.assertEqual(d.wait_exit(), 2, bad)
            self.assertIn("invalid value for --http-address", d.log_text(), bad)


class UnixSocketInUse(harness.DaemonTestCase):
    def test_live_socket_with_full_backlog(self):
        # README "Unix sockets": a leftover socket file is removed only if nothing answers on
        # it. A live one whose owner does not accept (a hung or stopped previous instance)
        # with its backlog full made the probe's blocking connect() wait forever: divvyd
        # hung at start instead of refusing the path.
        d = self.new_daemon(data_path("itest.ini"), listen=("unix",))
        live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(live.close)
        live.bind(d.unix_path)
        live.listen(0)
        queued = []
        self.addCleanup(lambda: [c.close() for c in queued])
        for _ in range(64):  # fill the backlog (bounded)
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.setblocking(False)
            try:
                c.connect(d.unix_path)
            except BlockingIOError:
                c.close()
                break
            queued.append(c)
        d.start(wait_ready=False)
        self.assertEqual(d.wait_exit(), 1)
        self.assertIn("%s is in use by another process" % d.unix_path, d.log_text())
        self.assertTrue(os.path.exists(d.unix_path))  # not removed


if __name__ == "__main__":
    harness.main()
