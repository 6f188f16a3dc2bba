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


if __name__ == "__main__":
    harness.main()
