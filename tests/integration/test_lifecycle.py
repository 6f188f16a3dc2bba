#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""divvyd's life: sd_notify, restart on the same database, SIGHUP reloads, SIGTERM with
requests in flight, the watchdog, socket activation.

- Many connections pipelining under --sync=always while SIGHUP reloads flip the config: every
  request answered once and in order, and the last reload takes effect.

What operators read of a configuration error, each a regression test of a bug:

- A configuration error quotes text of the file; a JSON string may hold a line break
  ("x\\nREADY=1"), an INI line an escape or a carriage return. The message must stay one
  line with no control bytes: it is one line of --check-config's output, one log line with
  its <N> prefix, and the value of STATUS= in an sd_notify datagram, where a line break
  would start another assignment (READY=1, STOPPING=1, MAINPID=...).
- A JSON operation key or value that no request can carry (a control byte, a '"',
  invalid UTF-8) made a rule that can never match, accepted without a word, where the
  same operation in an INI header is refused; and --dump-config then wrote it out as
  invalid JSON.
- STATUS= keeps a failed reload's first error in 512 bytes; the cut split a UTF-8
  character.
- The paths on the command line (the configuration, --db) went raw into STATUS= and into
  log lines: a line break in a path did what one in a configuration's text did.

A live Unix socket whose owner does not accept, its backlog full: refused at start, not waited
on for ever.

Run one test:  tests/integration/test_lifecycle.py Lifecycle.test_reload_valid
"""

import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultlib  # noqa: E402
import harness  # noqa: E402
from harness import data_path, example_path  # noqa: E402


class Lifecycle(harness.DaemonTestCase):
    def copy_config(self, d, name, dest="rules.ini"):
        """Copies fixture name into the daemon's temp dir (the file SIGHUP re-reads)."""
        path = os.path.join(d.tmpdir, dest)
        shutil.copyfile(data_path(name) if os.sep not in name else name, path + ".tmp")
        os.replace(path + ".tmp", path)  # atomic, like an editor or a config manager
        return path

    def daemon_with_copy(self, name, **kw):
        d = self.new_daemon(None, **kw)
        d.config = self.copy_config(d, name)
        d.start()
        return d

    def reload(self, d, name):
        """Replaces the config with fixture name, SIGHUPs, waits for RELOADING=1 then READY=1.
        Returns the notifications received since the signal."""
        self.copy_config(d, name)
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        seq_reloading, _ = d.wait_note("RELOADING=1", after=before)
        seq_ready, _ = d.wait_note("READY=1", after=seq_reloading, what="READY=1 after RELOADING=1")
        # The STATUS of this reload comes after READY=1 (the one after RELOADING=1 says
        # "Reloading").
        d.wait_note(re.compile(r"^STATUS="), after=seq_ready, what="STATUS after reload")
        return [l for s, l in d.notes if s > before]

    def test_notify_ready_status_stopping(self):
        d = self.start_daemon(data_path("itest.ini"))
        _, status = d.wait_note(re.compile(r"^STATUS=.*\brules\b"), what="STATUS mentioning rules")
        self.assertRegex(status, r"\b8 rules\b")
        self.assertRegex(status, r"\b2 listeners\b")
        self.assertEqual(d.request("HIT path=/open"), "OK true 5 0")
        seq = d.last_seq()
        self.assertEqual(d.stop(), 0)
        self.assertIn("STOPPING=1", [l for s, l in d.notes if s > seq])
        # Log lines carry the sd-daemon priority prefix.
        log = [l for l in d.log_text().splitlines() if l.strip()]
        bad = [l for l in log if not re.match(r"^<[0-7]>", l)]
        self.assertEqual(bad, [], "log lines without a <N> priority prefix")

    def test_sigint_stops_cleanly(self):
        d = self.start_daemon(data_path("itest.ini"))
        self.assertEqual(d.stop(signal.SIGINT), 0)
        self.assertIn("STOPPING=1", d.note_lines())

    def test_debug_logs_each_hit_with_its_rule(self):
        for how in ({"args": ["--debug"]}, {"env": {"DEBUG": "express,divvy"}}, {}):
            with self.subTest(**how):
                d = self.start_daemon(data_path("itest.ini"), **how)
                self.assertHit(d.request("HIT path=/probe user=dbg"), True, 9, 3600)
                self.assertEqual(d.stop(), 0)
                hits = [l for l in d.log_text().splitlines() if "user=dbg" in l]
                if how:
                    self.assertTrue(any(l.startswith("<7>") and "[path=/probe user=*]" in l for l in hits),
                                    d.log_tail())
                else:
                    self.assertEqual(hits, [], "HITs logged without --debug")

    def test_watchdog(self):
        d = self.start_daemon(data_path("itest.ini"), env={"WATCHDOG_USEC": "200000"})
        d.wait_note("WATCHDOG=1", timeout=5 * harness.TIMEOUT_SCALE, what="WATCHDOG=1 (WATCHDOG_USEC=200000)")
        self.assertEqual(d.request("HIT path=/open"), "OK true 5 0")
        self.assertEqual(d.stop(), 0)

    def test_no_watchdog_without_watchdog_usec(self):
        d = self.start_daemon(data_path("itest.ini"))
        self.assertEqual(d.request("HIT path=/open"), "OK true 5 0")
        self.assertEqual(d.stop(), 0)
        self.assertNotIn("WATCHDOG=1", d.note_lines())

    def test_counters_survive_restart(self):
        # In every --sync mode (none included: a clean exit commits), a restart continues.
        for sync in ("periodic", "none", "always"):
            with self.subTest(sync=sync):
                d = self.start_daemon(data_path("itest.ini"), args=["--sync=" + sync])
                user = "user=restart-" + sync
                t0 = time.monotonic()
                with d.connect("tcp") as c:
                    replies = [c.request("HIT path=/probe " + user) for _ in range(3)]
                self.assertWindow(replies, 10, 3600, t0=t0)
                self.assertEqual(d.stop(), 0)
                # A new process on the same --db (and a new port) continues the window.
                d.port = None
                d.start()
                with d.connect("unix") as c:
                    self.assertHit(c.request("HIT path=/probe " + user), True, 6, harness.elapsed_bounds(3600, t0))
                    self.assertHit(c.request("HIT path=/probe user=other-" + sync), True, 9, 3600)
                self.assertEqual(d.stop(), 0)

    def test_reload_valid(self):
        d = self.daemon_with_copy("reload-a.ini")
        with d.connect("tcp") as c:
            self.assertHit(c.request("HIT path=/kept user=u"), True, 9, 3600)
            self.assertHit(c.request("HIT path=/kept user=u"), True, 8, self.since_start(3600))
            self.assertEqual(c.request("HIT path=/new user=u"), "OK false 0 -1")
        notes = self.reload(d, "reload-b.ini")
        status = [l for l in notes if l.startswith("STATUS=")]
        self.assertTrue(any(re.search(r"\b3 rules\b", s) for s in status), status)
        self.assertFalse(any("Reload failed" in s for s in status), status)
        self.assertTrue(any(l.startswith("MONOTONIC_USEC=") for l in notes), notes)
        # A connection opened before the reload uses the new rules too.
        with d.connect("tcp") as c:
            self.assertHit(c.request("HIT path=/new user=u"), True, 6, 600)
            # Unchanged limits: the counter keeps counting.
            self.assertHit(c.request("HIT path=/kept user=u"), True, 7, self.since_start(3600))
        self.assertEqual(d.stop(), 0)

    def test_reload_keeps_open_connections(self):
        d = self.daemon_with_copy("reload-a.ini")
        with d.connect("unix") as c:
            self.assertHit(c.request("HIT path=/kept user=k"), True, 9, 3600)
            self.reload(d, "reload-b.ini")
            self.assertHit(c.request("HIT path=/new user=k"), True, 6, 600)
            self.assertHit(c.request("HIT path=/kept user=k"), True, 8, self.since_start(3600))
        self.assertEqual(d.stop(), 0)

    def test_reload_invalid(self):
        d = self.daemon_with_copy("reload-a.ini")
        with d.connect("tcp") as c:
            self.assertHit(c.request("HIT path=/kept user=v"), True, 9, 3600)
        notes = self.reload(d, "reload-bad.ini")
        status = [l for l in notes if l.startswith("STATUS=")]
        self.assertTrue(any(re.search(r"Reload failed: .*rules\.ini:\d+: .*serving previous rules", s)
                            for s in status), status)
        self.assertRegex(d.log_text(), r"rules\.ini:\d+")
        # The old rules still answer, and their counters keep counting.
        with d.connect("tcp") as c:
            self.assertHit(c.request("HIT path=/kept user=v"), True, 8, self.since_start(3600))
            self.assertEqual(c.request("HIT path=/open"), "OK false 0 -1")
        self.assertTrue(d.running())
        # A later good reload still works.
        self.reload(d, "reload-b.ini")
        self.assertHit(d.request("HIT path=/new user=v"), True, 6, 600)
        self.assertEqual(d.stop(), 0)

    def test_reload_missing_file(self):
        d = self.daemon_with_copy("reload-a.ini")
        os.unlink(d.config)
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        d.wait_note(re.compile(r"^STATUS=Reload failed"), after=before, what="STATUS=Reload failed")
        self.assertHit(d.request("HIT path=/kept user=m"), True, 9, 3600)
        self.assertEqual(d.stop(), 0)

    def test_canary_is_counted(self):
        # The canary's counter is decremented although it never decides: promote it (same
        # operation and limits, so the same counter) and its state shows.
        d = self.daemon_with_copy("itest.ini")
        with d.connect("tcp") as c:
            replies = [c.request("HIT path=/canary/x user=w") for _ in range(3)]
            self.assertWindow(replies, 5, 3600)
            self.assertEqual(c.request("HIT path=/canary/y user=once"), "OK false 0 -1")
        self.reload(d, "canary-promoted.ini")
        with d.connect("tcp") as c:
            # w: three canary hits used the canary's 2 credits.
            self.assertHit(c.request("HIT path=/canary/x user=w"), False, 0, self.since_start(3600))
            # once: one canary hit (through the default rule) left 1.
            self.assertHit(c.request("HIT path=/canary/z user=once"), True, 0, self.since_start(3600))
            # Someone the canary never saw starts fresh.
            self.assertHit(c.request("HIT path=/canary/x user=new"), True, 1, 3600)
        self.assertEqual(d.stop(), 0)

    def test_example_canary_promotion(self):
        # divvy README: "promote this rule ... by deleting the matchPolicy line".
        src = example_path("canary-config.ini")
        if not os.path.exists(src):
            self.skipTest("%s does not exist" % src)
        with open(src) as f:
            text = f.read()
        promoted, n = re.subn(r"(?m)^\s*matchPolicy\s*=\s*['\"]?canary['\"]?.*\n", "", text)
        if n != 1:
            self.skipTest("expected exactly one canary rule in %s, found %d" % (src, n))
        d = self.daemon_with_copy(src)
        with d.connect("tcp") as c:
            replies = [c.request("HIT method=GET path=/pantry/cookies/special-cookie ip=192.168.1.1")
                       for _ in range(2)]
            self.assertWindow(replies, 3, 3600)
        path = os.path.join(d.tmpdir, "promoted.ini")
        with open(path, "w") as f:
            f.write(promoted)
        self.reload(d, path)
        with d.connect("tcp") as c:
            # The canary (1 per day, across all IPs) was used up by the first hit.
            self.assertHit(c.request("HIT method=GET path=/pantry/cookies/special-cookie ip=10.0.0.9"),
                           False, 0, self.since_start(86400))
        self.assertEqual(d.stop(), 0)

    def stuck_client(self, d):
        """A Unix connection that pipelines HITs without reading its replies, until the daemon
        stops reading it (its replies fill the socket and --output-limit). Returns (conn,
        bytes sent, stop event of the sending thread, the thread)."""
        line = b"HIT path=/big user=term\n"
        c = d.connect("unix")
        self.addCleanup(c.close)
        payload = line * 80000  # under /big's 100,000 per window: every reply counts down
        sent = [0]
        stop = threading.Event()

        def sender():
            while not stop.is_set() and sent[0] < len(payload):
                _, w, _ = select.select([], [c.sock], [], 0.05)
                if w:
                    try:
                        sent[0] += c.sock.send(payload[sent[0]:sent[0] + 65536], socket.MSG_DONTWAIT)
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        return  # the daemon closed the connection (at its exit)

        t = threading.Thread(target=sender, daemon=True)
        t.start()
        self.addCleanup(stop.set)
        # The daemon has read and answered some (a reply is waiting), then stopped reading:
        # the sender stalls. (Only the likelihood of pending requests depends on this.)
        r, _, _ = select.select([c.sock], [], [], harness.IO_TIMEOUT)
        self.assertTrue(r, "no reply within %.0fs" % harness.IO_TIMEOUT)
        last, stalls = -1, 0
        for _ in range(int(100 * harness.TIMEOUT_SCALE)):
            if sent[0] == last:
                stalls += 1
                if stalls >= 3:
                    break
            else:
                last, stalls = sent[0], 0
            d.drain_notes(0.05)
        return c, line, sent, stop, t

    def test_sigterm_answers_every_request_read(self):
        # A client pipelines HITs and does not read its replies: with a small --output-limit
        # the daemon stops reading it while requests it has already read wait for room. At
        # SIGTERM every request the daemon has read must be answered (and counted), nothing
        # more. How many it has read is the kernel's count (bytes sent minus bytes still queued
        # on the daemon's socket; after STOPPING=1 it reads no more): an exact N, no timing.
        # A Unix socket: nothing in flight, and a fixed send buffer that fills up.
        d = self.start_daemon(data_path("itest.ini"), args=["--output-limit", "4096"])
        c, line, sent, stop, t = self.stuck_client(d)
        seq = d.last_seq()
        d.signal(signal.SIGTERM)
        d.wait_note("STOPPING=1", after=seq)
        stop.set()
        t.join(harness.IO_TIMEOUT)
        self.assertFalse(t.is_alive())
        consumed = sent[0] - harness.unix_peer_unread(c.sock)
        self.assertEqual(sent[0] - harness.unix_peer_unread(c.sock), consumed,
                         "the daemon read more after STOPPING=1")
        n = consumed // len(line)  # complete requests read; a partial last line is not one
        self.assertGreater(n, 0)
        self.assertLess(consumed, sent[0], "the daemon read everything: nothing was left unread")
        got = c.read_until_eof()
        print("(%d of %d requests sent were read before SIGTERM, %d answered)" %
              (n, sent[0] // len(line), len(got)), end=" ")
        self.assertEqual(d.wait_exit(), 0)
        self.assertEqual(len(got), n, "requests read before SIGTERM: %d, replies: %d" % (n, len(got)))
        for i, reply in enumerate(got):
            p = harness.parse_ok(reply)
            if p is None or p[:2] != (True, 99999 - i):
                self.fail("reply %d of %d is %r, expected credit %d" % (i, len(got), reply, 99999 - i))
        # And what was answered was counted (and committed): a restart continues from there.
        d.port = None
        d.start()
        self.assertHit(d.request("HIT path=/big user=term"), True, 99999 - n, self.since_start(3600))
        self.assertEqual(d.stop(), 0)

    def test_stop_closes_idle_pooled_connections_at_once(self):
        # A client pool's idle connections do not hold up a stop: the daemon closes them itself
        # (each client sees EOF while it still holds its socket open) instead of half-closing
        # and waiting for their EOF up to the linger bound. A pipeline sent just before SIGTERM
        # is still answered whole. Counted from the daemon's debug log, not timed.
        idle_n, pipe_n = 20, 50
        d = self.start_daemon(data_path("itest.ini"), args=["--debug"])
        idle = []
        for i in range(idle_n):
            c = d.connect("tcp" if i % 2 else "unix")
            self.addCleanup(c.close)
            self.assertEqual(c.request("HIT path=/open"), "OK true 5 0")
            idle.append(c)
        p = d.connect("unix")
        self.addCleanup(p.close)
        p.send("".join("HIT path=/big user=pool\n" for _ in range(pipe_n)))
        d.signal(signal.SIGTERM)
        got = p.read_until_eof()
        self.assertEqual(len(got), pipe_n, "a pipeline sent before SIGTERM: %d replies" % len(got))
        for i, reply in enumerate(got):
            self.assertEqual(harness.parse_ok(reply)[:2], (True, 99999 - i), reply)
        p.close()
        for c in idle:
            self.assertTrue(c.at_eof(), "an idle connection got data instead of EOF")
        # Every idle client still holds its socket open; the daemon exits all the same.
        self.assertEqual(d.wait_exit(), 0)
        log = d.log_text()
        # (the pipeline's connection too when the daemon had answered it all before SIGTERM)
        self.assertIn(log.count("nothing to answer at stop, closing"), (idle_n, idle_n + 1), d.log_tail())
        self.assertEqual(log.count("peer did not close"), 0, d.log_tail())

    def test_second_sigterm_exits_at_once(self):
        # A client that never takes its replies holds the drain (up to 5 s); a second SIGTERM
        # ends it at once: the daemon says so, and the drain limit never fired.
        d = self.start_daemon(data_path("itest.ini"), args=["--output-limit", "4096"])
        self.stuck_client(d)
        seq = d.last_seq()
        d.signal(signal.SIGTERM)
        d.wait_note("STOPPING=1", after=seq)
        self.assertTrue(d.running(), "exited although a client has replies pending")
        d.signal(signal.SIGTERM)
        self.assertEqual(d.wait_exit(), 0)
        log = d.log_text()
        self.assertIn("Second SIGTERM, stopping now", log)
        self.assertNotIn("did not take their last replies", log)

    def test_drain_limit_and_healthz_during_shutdown(self):
        # At SIGTERM a client that never takes its replies gets 5 s (MANAGER_STOP_TIMEOUT_USEC),
        # then the daemon closes it and exits 0. Meanwhile /healthz answers 503.
        port = harness.free_tcp_port()
        d = self.start_daemon(data_path("itest.ini"), args=["--output-limit", "4096", "--http-port=%d" % port])
        url = "http://127.0.0.1:%d/healthz" % port
        with urllib.request.urlopen(url, timeout=harness.IO_TIMEOUT) as r:
            self.assertEqual((r.status, r.read()), (200, b"ok\n"))
        self.stuck_client(d)
        seq = d.last_seq()
        t0 = time.monotonic()
        d.signal(signal.SIGTERM)
        d.wait_note("STOPPING=1", after=seq)
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen(url, timeout=harness.IO_TIMEOUT)
        self.assertEqual((cm.exception.code, cm.exception.read()), (503, b"not serving\n"))
        self.assertTrue(d.running(), "exited although a client has replies pending")
        self.assertEqual(d.wait_exit(timeout=5 + harness.STOP_TIMEOUT), 0)
        # A lower bound only: the limit cannot fire before 5 s (no upper bound is asserted).
        self.assertGreaterEqual(time.monotonic() - t0, 5.0)
        self.assertIn("Clients did not take their last replies within 5 s", d.log_text())

    def test_idle_timeout(self):
        # --idle-timeout=2: a connection silent for 2 s is closed; one that keeps asking is not.
        timeout = 2
        d = self.start_daemon(data_path("itest.ini"), args=["--idle-timeout=%d" % timeout])
        idle, active = d.connect("tcp"), d.connect("unix")
        self.addCleanup(idle.close)
        self.addCleanup(active.close)
        t_idle = time.monotonic()
        self.assertEqual(idle.request("HIT path=/open"), "OK true 5 0")
        # The active one asks every 0.1 s for 2.5 timeouts. Each gap between its requests is
        # measured: a close after a gap this machine stretched to the timeout (a stall) is no
        # daemon bug; the connection is replaced and the stall counted (at most 3). A close
        # after short gaps only fails the test.
        idle_closed_after = None
        last = time.monotonic()
        stalls = 0
        while time.monotonic() - t_idle < 2.5 * timeout * harness.TIMEOUT_SCALE:
            gap = time.monotonic() - last
            try:
                r = active.request("HIT path=/open")
            except OSError:
                r = None
            last = time.monotonic()
            if r is None:
                self.assertGreaterEqual(gap, timeout / 2, "the active connection was closed after a "
                                        "gap of only %.2f s (--idle-timeout=%d)" % (gap, timeout))
                stalls += 1
                self.assertLess(stalls, 3, "this machine stalled the active client 3 times: cannot "
                                "tell idle from active")
                active.close()
                active = d.connect("unix")
                self.addCleanup(active.close)
                continue
            self.assertEqual(r, "OK true 5 0")
            if idle_closed_after is None:
                rd, _, _ = select.select([idle.sock], [], [], 0.1)
                if rd:
                    self.assertTrue(idle.at_eof(), "the idle connection got data instead of EOF")
                    idle_closed_after = time.monotonic() - t_idle
            else:
                time.sleep(0.1)
        self.assertIsNotNone(idle_closed_after, "the idle connection was not closed within %.0f s" %
                             (2.5 * timeout * harness.TIMEOUT_SCALE))
        # Never before its timeout (measured from before its last request: a lower bound).
        self.assertGreaterEqual(idle_closed_after, timeout)
        # A new connection is served as usual.
        self.assertEqual(d.request("HIT path=/open"), "OK true 5 0")

    def test_default_listener_is_loopback_only(self):
        # No --listen: the daemon listens on 127.0.0.1:$PORT, and on no other address (not
        # 0.0.0.0, not ::). Its listening sockets, by inode, from /proc.
        d = self.new_daemon(data_path("itest.ini"), listen=())
        d.port = harness.free_tcp_port()
        d.extra_env["PORT"] = str(d.port)
        d.start()
        self.assertEqual(d.request("HIT path=/open"), "OK true 5 0")
        inodes = set()
        for fd in os.listdir("/proc/%d/fd" % d.pid()):
            try:
                m = re.match(r"socket:\[(\d+)\]$", os.readlink("/proc/%d/fd/%s" % (d.pid(), fd)))
            except OSError:
                continue
            if m:
                inodes.add(m.group(1))
        listening = []
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            if not os.path.exists(table):
                continue
            with open(table) as f:
                next(f)
                for row in f:
                    col = row.split()
                    local, state, inode = col[1], col[3], col[9]
                    if state == "0A" and inode in inodes:  # TCP_LISTEN, the daemon's
                        addr, port = local.split(":")
                        listening.append((addr, int(port, 16)))
        self.assertEqual(listening, [("0100007F", d.port)],
                         "listening sockets (hex address, port): 0100007F is 127.0.0.1")
        self.assertEqual(d.stop(), 0)

    def test_unix_socket_removed_at_exit(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            d = self.start_daemon(data_path("itest.ini"), listen=("unix",))
            self.assertEqual(d.request("HIT path=/open", "unix"), "OK true 5 0")
            self.assertTrue(os.path.exists(d.unix_path))
            self.assertEqual(d.stop(sig), 0)
            self.assertFalse(os.path.exists(d.unix_path), "%s left after %s" % (d.unix_path, sig.name))

    def test_sigkill_then_restart(self):
        # A crash (SIGKILL) loses no committed hit and leaves nothing that blocks a restart
        # on the same --db and the same Unix socket path.
        d = self.start_daemon(data_path("itest.ini"))
        with d.connect("unix") as c:
            replies = [c.request("HIT path=/probe user=crash") for _ in range(4)]
        self.assertWindow(replies, 10, 3600)
        self.assertEqual(d.stop(signal.SIGKILL), -signal.SIGKILL)
        d.port = None
        d.start()
        with d.connect("unix") as c:
            self.assertHit(c.request("HIT path=/probe user=crash"), True, 5, self.since_start(3600))
        self.assertEqual(d.stop(), 0)

    def test_default_listen_port_and_state_directory(self):
        # No --listen: tcp:127.0.0.1:$PORT. No --db: $STATE_DIRECTORY.
        d = self.new_daemon(data_path("itest.ini"), listen=(), db=False)
        state = os.path.join(d.tmpdir, "state")
        os.mkdir(state)
        d.port = harness.free_tcp_port()
        d.extra_env.update(PORT=str(d.port), STATE_DIRECTORY=state)
        d.start()
        self.assertHit(d.request("HIT path=/probe user=env"), True, 9, 3600)
        self.assertEqual(d.stop(), 0)
        self.assertNotEqual(os.listdir(state), [], "nothing stored in $STATE_DIRECTORY")
        d.start()
        self.assertHit(d.request("HIT path=/probe user=env"), True, 8, self.since_start(3600))
        self.assertEqual(d.stop(), 0)

    def test_unix_socket_mode(self):
        d = self.start_daemon(data_path("itest.ini"), listen=("unix",))
        self.assertEqual(os.stat(d.unix_path).st_mode & 0o777, 0o660)
        self.assertEqual(d.stop(), 0)
        d2 = self.start_daemon(data_path("itest.ini"), listen=("unix",), args=["--unix-mode=0600"])
        self.assertEqual(os.stat(d2.unix_path).st_mode & 0o777, 0o600)
        self.assertEqual(d2.request("HIT path=/open", "unix"), "OK true 5 0")
        self.assertEqual(d2.stop(), 0)

    def test_ipv6_listener(self):
        try:
            with harness.socket.socket(harness.socket.AF_INET6) as s:
                s.bind(("::1", 0))
        except OSError as e:
            self.skipTest("no IPv6 loopback here: %s" % e)
        d = self.new_daemon(data_path("itest.ini"), listen=())
        d.port = harness.free_tcp_port()
        d.args = ["--listen", "tcp:[::1]:%d" % d.port]
        d.start()
        with harness.Conn(harness.socket.create_connection(("::1", d.port), timeout=harness.IO_TIMEOUT)) as c:
            self.assertEqual(c.request("HIT path=/open"), "OK true 5 0")
        self.assertEqual(d.stop(), 0)

    def test_max_connections(self):
        d = self.start_daemon(data_path("itest.ini"), args=["--max-connections=2"])
        with d.connect("tcp") as a, d.connect("unix") as b:
            self.assertEqual(a.request("HIT path=/open"), "OK true 5 0")
            self.assertEqual(b.request("HIT path=/open"), "OK true 5 0")
            for kind in ("tcp", "unix"):
                with d.connect(kind) as c:
                    # A request sent at once on the refused connection (before its refusal
                    # is read) is not executed: its counter is untouched below.
                    try:
                        c.send("HIT path=/probe user=refused-%s\n" % kind)
                    except OSError:
                        pass  # already closed by the daemon: fine, not executed either
                    self.assertEqual(c.read_until_eof(), ['ERR unknown "too many connections"'], kind)
                self.assertHit(a.request("HIT path=/probe user=refused-%s" % kind), True, 9, 3600,
                               "(the request on the refused %s connection was executed)" % kind)
            # The first two are unaffected.
            self.assertEqual(a.request("HIT path=/open"), "OK true 5 0")
            self.assertEqual(b.request("HIT path=/open"), "OK true 5 0")
        # Their slots are free again once they are gone (the daemon notices the close
        # asynchronously: retry a bounded number of times).
        for _ in range(int(50 * harness.TIMEOUT_SCALE)):
            with d.connect("tcp") as c:
                r = c.request("HIT path=/open")
            if r == "OK true 5 0":
                break
            d.drain_notes(0.05)
        self.assertEqual(r, "OK true 5 0")
        self.assertEqual(d.stop(), 0)

    def test_start_fails_on_bad_config(self):
        d = self.new_daemon(data_path("reload-bad.ini"))
        d.start(wait_ready=False)
        self.assertEqual(d.wait_exit(), 1)
        self.assertNotIn("READY=1", d.note_lines())
        self.assertRegex(d.log_text(), r"reload-bad\.ini:\d+")

    def test_start_fails_when_address_in_use(self):
        with harness.socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen(1)
            d = self.new_daemon(data_path("itest.ini"), listen=("tcp",))
            d.port = busy.getsockname()[1]
            d.start(wait_ready=False)
            self.assertEqual(d.wait_exit(), 1)
        self.assertNotIn("READY=1", d.note_lines())
        self.assertIn("127.0.0.1:%d" % d.port, d.log_text())

    def test_socket_activation(self):
        sa = harness.socket_activate_path()
        if not sa:
            self.skipTest("systemd-socket-activate not found (set SYSTEMD_SOCKET_ACTIVATE)")
        d = self.new_daemon(data_path("itest.ini"), activate=True)
        d.start(wait_ready=False)
        # systemd-socket-activate starts divvyd at the first connection; this one is queued
        # on the passed socket until the daemon accepts it.
        c = None
        for _ in range(int(50 * harness.TIMEOUT_SCALE)):
            try:
                c = d.connect("tcp")
                break
            except OSError:
                if not d.running():
                    self.fail("systemd-socket-activate exited: %s" % d.log_tail())
                d.drain_notes(0.1)
        self.assertIsNotNone(c, "nothing listening on 127.0.0.1:%d" % d.port)
        with c:
            d.wait_ready()
            self.assertEqual(c.request("HIT path=/open"), "OK true 5 0")
        with d.connect("unix") as c:
            self.assertHit(c.request("HIT path=/probe user=sa"), True, 9, 3600)
        with d.connect("tcp") as c:
            self.assertHit(c.request("HIT path=/probe user=sa"), True, 8, self.since_start(3600))
        _, status = d.wait_note(re.compile(r"^STATUS=.*\brules\b"), what="STATUS")
        self.assertRegex(status, r"\b2 listeners\b")
        self.assertEqual(d.stop(), 0)
        self.assertIn("STOPPING=1", d.note_lines())


class ReloadInFlight(harness.DaemonTestCase):
    def test_sighup_during_pipelines_sync_always(self):
        tmp = harness.make_tmpdir()
        self.addCleanup(shutil.rmtree, tmp, True)
        with open(data_path("itest.ini")) as f:
            base = f.read()
        with_hup = base.replace("[default]", "[path=/hup]\ncreditLimit = 7\nresetSeconds = 0\n\n[default]")
        config = os.path.join(tmp, "rules.ini")

        def write(text):
            with open(config + ".new", "w") as f:
                f.write(text)
            os.rename(config + ".new", config)

        write(base)
        d = self.start_daemon(config, args=["--sync=always"])
        stop_draining = d.drain_notes_in_background(self)
        n_conns, n_reqs = 16, 1500
        results, errors = {}, []

        def client(i):
            try:
                with d.connect("unix" if i % 2 else "tcp") as c:
                    if i % 4 < 2:
                        payload = ("HIT path=/big user=r%d\n" % i).encode() * n_reqs
                    else:
                        payload = harness.resp_command("HIT", "path", "/big", "user", "r%d" % i) * n_reqs
                    t = threading.Thread(target=faultlib.send_quietly, args=(c.sock, payload, True), daemon=True)
                    t.start()
                    results[i] = harness.read_until_close(c.sock, reset_ends=True)
                    t.join(harness.IO_TIMEOUT)
            except Exception as e:
                errors.append("client %d: %r" % (i, e))

        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n_conns)]
        for t in threads:
            t.start()
        for k in range(10):
            write(with_hup if k % 2 == 0 else base)
            d.signal(signal.SIGHUP)
            time.sleep(0.02)  # spreads the reloads over the load; no check depends on it
        for t in threads:
            t.join(harness.IO_TIMEOUT * 3)
        stop_draining()
        self.assertEqual(errors, [])
        for i in range(n_conns):
            out = results.get(i, b"")
            if i % 4 < 2:
                got = [harness.parse_ok(l)[:2] if harness.parse_ok(l) else l
                       for l in out.decode().splitlines()]
            else:
                got = [(a == b"1", int(b)) for a, b in re.findall(rb"\*3\r\n:(\d)\r\n:(\d+)\r\n:\d+\r\n", out)]
                self.assertEqual(len(out), sum(len(b"*3\r\n:1\r\n:%d\r\n:3600\r\n" % (99999 - j))
                                               for j in range(n_reqs)), "client %d" % i)
            self.assertEqual(got, [(True, 99999 - j) for j in range(n_reqs)], "client %d" % i)
        write(with_hup)
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        d.wait_note("READY=1", after=before, what="READY=1 after the last reload")
        self.assertEqual(d.request("HIT path=/hup"), "OK true 7 0")


GOOD_JSON = """\
{
  "overrides": [
    { "operation": { "path": "/kept" }, "creditLimit": 10, "resetSeconds": 3600 }
  ],
  "default": { "creditLimit": 0, "resetSeconds": 0 }
}
"""


# An unknown top-level key whose name holds line breaks: each part after one looks like an
# sd_notify assignment. OPS_INJECTED is harmless if it leaks; READY=1 would not be.
HOSTILE_JSON = GOOD_JSON.replace('"default"', '"x\\nOPS_INJECTED=1\\nREADY=1": 1,\n  "default"')


CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def write(path, text, mode="w"):
    with open(path + ".tmp", mode) as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def check_config(path):
    p = subprocess.run([harness.divvyd_path(), "--check-config", path], capture_output=True,
                       timeout=harness.IO_TIMEOUT)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


class ConfigErrors(harness.DaemonTestCase):
    def tmp(self):
        d = harness.make_tmpdir()
        self.addCleanup(harness.shutil.rmtree, d, True)
        return d

    # Bug: diag messages quoted JSON keys and INI text raw, so a line break in the file
    # split the message: extra lines in --check-config's output, a log line without its
    # priority prefix, and an assignment of the file's choosing in the STATUS= datagram.
    def test_check_config_errors_are_one_line_each(self):
        tmp = self.tmp()
        cases = {
            "key.json": HOSTILE_JSON,
            "op.json": GOOD_JSON.replace('"path": "/kept"', '"a\\nb": null'),
            "twice.json": GOOD_JSON.replace('"path": "/kept"', '"a\\rb": "1", "a\\rb": "2"'),
            "outside.ini": "junk\x1b[31mred\r\n[default]\ncreditLimit = 0\nresetSeconds = 0\n",
            "header.ini": "[path=/a\x1b]\ncreditLimit = 1\nresetSeconds = 1\n"
                          "[default]\ncreditLimit = 0\nresetSeconds = 0\n",
            "cr.ini": "[path=/a\rX]\ncreditLimit = 1\nresetSeconds = 1\n"
                      "[default]\ncreditLimit = 0\nresetSeconds = 0\n",
        }
        for name, text in cases.items():
            with self.subTest(name):
                path = os.path.join(tmp, name)
                write(path, text.encode("utf-8"), "wb")
                rc, out, err = check_config(path)
                self.assertEqual((rc, out), (1, ""), err)
                lines = err.split("\n")
                self.assertEqual(lines[-1], "", repr(err))
                for line in lines[:-1]:
                    self.assertTrue(line.startswith(path + ":"), repr(err))
                    self.assertIsNone(CONTROL.search(line), repr(err))

    # Bug: the JSON reader took any string as an operation key or value; INI refuses them.
    def test_json_operation_a_request_cannot_carry(self):
        tmp = self.tmp()
        cases = {
            "line break in value": ('"path": "/a\\nb"', "control"),
            "quote in value": ('"path": "/a\\"b"', "'\"'"),
            "control in key": ('"pa\\u0001th": "/a"', "control"),
            "invalid UTF-8": ('"path": "/a\xff"', "UTF-8"),
        }
        for name, (op, why) in cases.items():
            with self.subTest(name):
                path = os.path.join(tmp, "rules.json")
                write(path, GOOD_JSON.replace('"path": "/kept"', op).encode("latin-1"), "wb")
                rc, out, err = check_config(path)
                self.assertEqual((rc, out), (1, ""), err)
                self.assertRegex(err, r"^%s:3: overrides\[0\]: operation: .*%s" % (re.escape(path),
                                                                                 re.escape(why)))
        # What a request can carry stays accepted: spaces, '=', tabs and UTF-8, quoted on the wire.
        path = os.path.join(tmp, "ok.json")
        write(path, GOOD_JSON.replace('"path": "/kept"', '"path": "/a b=c\\t\u00e9", "q w": "1"'))
        self.assertEqual(check_config(path)[0], 0)

    def test_reload_error_is_one_status_line(self):
        d = self.new_daemon(None)
        d.config = os.path.join(d.tmpdir, "rules.json")
        write(d.config, GOOD_JSON)
        d.start()
        self.assertHit(d.request("HIT path=/kept"), True, 9, 3600)
        write(d.config, HOSTILE_JSON)
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        seq, status = d.wait_note(re.compile(r"^STATUS=Reload failed"), after=before,
                                  what="STATUS=Reload failed")
        # READY=1 follows the reload; wait for it, then look at every line since the signal.
        d.wait_note("READY=1", after=before)
        notes = [l for s, l in d.notes if s > before]
        self.assertFalse([l for l in notes if l.startswith("OPS_INJECTED")], notes)
        self.assertEqual([l for l in notes if l == "READY=1"], ["READY=1"], notes)
        self.assertIn("unknown key", status)
        self.assertHit(d.request("HIT path=/kept"), True, 8, self.since_start(3600))
        self.assertEqual(d.stop(), 0)
        bad = [l for l in d.log_text().splitlines() if not re.match(r"^<[0-7]>", l)]
        self.assertEqual(bad, [], "log lines without a <N> priority prefix")

    # Bug: the first error of a failed reload was kept for STATUS= in 512 bytes by snprintf(),
    # which could cut a UTF-8 character in two: the datagram's text ended in half a character.
    def test_reload_error_cut_at_a_character(self):
        tmp = self.tmp()
        # A path of more than 512 bytes, mostly two-byte characters, padded with ASCII so that
        # byte 510 (the last one a 511-byte cut keeps) starts a character: the cut splits it.
        for pad in ("", "x"):
            deep = os.path.join(tmp, pad + "\u00e9" * 120, "\u00e9" * 120, "\u00e9" * 120)
            if len(deep.encode()) > 520 and deep.encode()[510] == 0xC3:
                break
        else:
            self.fail("no padding puts a lead byte at 510")
        os.makedirs(deep)
        d = self.new_daemon(None)
        d.config = os.path.join(deep, "rules.json")
        write(d.config, GOOD_JSON)
        d.start()
        write(d.config, GOOD_JSON.replace('"default"', '"unknown": 1,\n  "default"'))
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        _, status = d.wait_note(re.compile(r"^STATUS=Reload failed"), after=before,
                                what="STATUS=Reload failed")
        self.assertNotIn("\ufffd", status)  # the harness decodes with errors="replace"
        kept = status[len("STATUS=Reload failed: "):-len("; serving previous rules")]
        self.assertTrue(d.config.startswith(kept), (kept, d.config))
        self.assertEqual(len(kept.encode()), 510)  # the split character left out whole
        self.assertEqual(d.stop(), 0)

    # Bug: "STATUS=Reloading <path>", "STATUS=Checking the database in <path>" and the log
    # lines "Loaded/Reloading/Reloaded <path>" quoted the paths given on the command line
    # raw. Every STATUS= and every log line now masks control bytes, whatever it quotes.
    def test_paths_with_line_breaks_stay_one_line(self):
        tmp = self.tmp()
        conf_dir = os.path.join(tmp, "conf\nOPS_INJECTED=1\nREADY=1")
        os.makedirs(conf_dir)
        d = self.new_daemon(None, db=os.path.join(tmp, "db\nOPS_DB_INJECTED=1"))
        d.config = os.path.join(conf_dir, "rules.json")
        write(d.config, GOOD_JSON)
        d.start()
        self.assertHit(d.request("HIT path=/kept"), True, 9, 3600)
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        _, status = d.wait_note(re.compile(r"^STATUS=Reloading "), after=before,
                                what="STATUS=Reloading")
        self.assertIn("conf?OPS_INJECTED=1?READY=1", status)
        d.wait_note(re.compile(r"^STATUS=Serving "), after=before, what="STATUS=Serving")
        self.assertHit(d.request("HIT path=/kept"), True, 8, self.since_start(3600))
        self.assertEqual(d.stop(), 0)
        notes = [l for _, l in d.notes]
        self.assertFalse([l for l in notes if l.startswith("OPS_")], notes)
        self.assertEqual([l for l in notes if l == "READY=1"], ["READY=1", "READY=1"], notes)
        self.assertTrue([l for l in notes if l.startswith("STATUS=Checking the database in ")
                         and l.endswith("db?OPS_DB_INJECTED=1")], notes)
        log = d.log_text().splitlines()
        self.assertEqual([l for l in log if not re.match(r"^<[0-7]>", l)], [],
                         "log lines without a <N> priority prefix")
        self.assertTrue([l for l in log if "Reloaded " in l and "conf?OPS_INJECTED=1?READY=1" in l],
                        log)


class UnixSocketInUse(harness.DaemonTestCase):
    def test_live_socket_with_full_backlog(self):
        # docs/running.md "Unix sockets": a leftover socket file is removed only if nothing answers on
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
