# SPDX-License-Identifier: MIT
"""Admin listeners (issue #15): `--listen admin:unix:PATH` / `admin:tcp:HOST:PORT`, and sockets
passed by systemd whose name starts with "admin". Only their connections may send REFUND and
RESET (the verbs' own tests check the refusal elsewhere); here: they are created with the right
mode (0600 by default, --admin-unix-mode), named as admin in the log (with a warning when one is
on TCP, which has no mode), serve HIT like any listener on the same counters, a plain listener
is never taken for an admin one, and --inspect=admin confines PEEK and EXPLAIN to them."""

import os
import re

import harness
from harness import data_path


def mode(path):
    return os.stat(path).st_mode & 0o7777


class AdminDaemon(harness.Daemon):
    """A Daemon with one more listener, the admin one, at <tmp>/admin.sock: by --listen, or
    when activate=True, passed by systemd-socket-activate with the name admin_fdname."""

    def __init__(self, config, admin_fdname="admin", **kw):
        super().__init__(config, **kw)
        self.admin_path = os.path.join(self.tmpdir, "admin.sock")
        self.admin_fdname = admin_fdname

    def command(self):
        cmd = super().command()
        if self.activate:
            # systemd-socket-activate's options go before the program; --fdname accumulates
            # after the harness's "--fdname=tcp:unix".
            return ["-l", self.admin_path, "--fdname=" + self.admin_fdname] + cmd
        return cmd[:-1] + ["--listen", "admin:unix:" + self.admin_path, cmd[-1]]

    def connect_admin(self):
        s = harness.socket.socket(harness.socket.AF_UNIX, harness.socket.SOCK_STREAM)
        s.settimeout(harness.IO_TIMEOUT)
        s.connect(self.admin_path)
        return harness.Conn(s)


class TestAdminListeners(harness.DaemonTestCase):

    def start_admin_daemon(self, **kw):
        d = AdminDaemon(data_path("itest.ini"), **kw)
        self.addCleanup(d.cleanup)
        harness._DAEMONS.append(d)
        return d

    def listening_lines(self, d):
        return [l for l in d.log_text().splitlines() if "Listening on " in l]

    def admin_tcp_warnings(self, d):
        return [l for l in d.log_text().splitlines() if "admin listener on TCP" in l]

    def test_admin_unix_socket_mode_and_hits(self):
        d = self.start_admin_daemon()
        d.start()
        # The plain Unix socket keeps --unix-mode's default; the admin one is 0600.
        self.assertEqual(mode(d.unix_path), 0o660)
        self.assertEqual(mode(d.admin_path), 0o600)
        # All three listeners serve HIT, on the same counters.
        with d.connect_admin() as c:
            self.assertHit(c.request("HIT path=/probe user=admin-unix"), True, 9, 3600)
            self.assertEqual(c.request("HIT path=/open"), "OK true 5 0")
        self.assertHit(d.request("HIT path=/probe user=admin-unix", "unix"), True, 8, self.since_start(3600))
        self.assertHit(d.request("HIT path=/probe user=admin-unix", "tcp"), True, 7, self.since_start(3600))
        # The log names the admin listener as such, and only it.
        lines = self.listening_lines(d)
        self.assertEqual(len(lines), 3, lines)
        admin = [l for l in lines if "admin" in l]
        self.assertEqual(len(admin), 1, lines)
        self.assertTrue(admin[0].endswith("Listening on admin:unix:" + d.admin_path), admin)
        self.assertTrue(any(l.endswith("Listening on unix:" + d.unix_path) for l in lines), lines)
        self.assertTrue(any(l.endswith("Listening on tcp:127.0.0.1:%d" % d.port) for l in lines), lines)
        self.assertEqual(self.admin_tcp_warnings(d), [])  # an admin Unix socket has its mode
        self.assertEqual(d.stop(), 0)
        # Both socket files are removed at exit.
        self.assertFalse(os.path.exists(d.admin_path))
        self.assertFalse(os.path.exists(d.unix_path))

    def test_admin_unix_mode_options_are_independent(self):
        # --unix-mode does not open the admin socket wider ...
        d = self.start_admin_daemon(args=["--unix-mode=0666"])
        d.start()
        self.assertEqual(mode(d.unix_path), 0o666)
        self.assertEqual(mode(d.admin_path), 0o600)
        self.assertEqual(d.stop(), 0)
        # ... and --admin-unix-mode changes only the admin socket.
        d2 = self.start_admin_daemon(args=["--admin-unix-mode=0660"])
        d2.start()
        self.assertEqual(mode(d2.unix_path), 0o660)
        self.assertEqual(mode(d2.admin_path), 0o660)
        with d2.connect_admin() as c:
            self.assertEqual(c.request("HIT path=/open"), "OK true 5 0")
        self.assertEqual(d2.stop(), 0)

    def test_admin_tcp_listener(self):
        d = self.new_daemon(data_path("itest.ini"), listen=("unix",))
        d.port = harness.free_tcp_port()
        d.args = ["--listen", "admin:tcp:127.0.0.1:%d" % d.port]
        d.start()
        with d.connect("tcp") as c:
            self.assertHit(c.request("HIT path=/probe user=admin-tcp"), True, 9, 3600)
        self.assertHit(d.request("HIT path=/probe user=admin-tcp", "unix"), True, 8, self.since_start(3600))
        lines = self.listening_lines(d)
        self.assertEqual(len(lines), 2, lines)
        self.assertTrue(any(l.endswith("Listening on admin:tcp:127.0.0.1:%d" % d.port) for l in lines), lines)
        self.assertTrue(any(l.endswith("Listening on unix:" + d.unix_path) for l in lines), lines)
        # Every local user may connect to it: said once, as a warning, naming the listener.
        warnings = self.admin_tcp_warnings(d)
        self.assertEqual(len(warnings), 1, d.log_text())
        self.assertTrue(warnings[0].startswith("<4>admin:tcp:127.0.0.1:%d: " % d.port), warnings)
        self.assertEqual(d.stop(), 0)

    def test_inspect_admin(self):
        """--inspect=admin: PEEK and EXPLAIN get REFUND's refusal off admin listeners, over the
        line protocol (which then closes, as after any error) and RESP (which goes on); admin
        listeners answer them, and every other verb is answered everywhere as before."""
        d = self.start_admin_daemon(args=["--inspect=admin"])
        d.start()
        pairs = "path=/probe user=inspect"
        for verb in ("PEEK", "EXPLAIN", "REFUND 1"):
            name = verb.split()[0]
            with d.connect("tcp") as c:
                self.assertEqual(c.request("%s %s" % (verb, pairs)),
                                 'ERR forbidden "%s needs an admin listener"' % name)
                self.assertTrue(c.at_eof())
            with d.connect("unix") as c:
                c.send(harness.resp_command(*(verb.split() + ["path", "/probe", "user", "inspect"])))
                self.assertEqual(c.readline(), "-ERR forbidden %s needs an admin listener\r" % name)
                c.send(harness.resp_command("PING"))
                self.assertEqual(c.readline(), "+PONG\r")
        with d.connect("tcp") as c:
            self.assertTrue(c.request("TAKE 1 " + pairs).startswith("OK allowed=true credit=9 "))
            self.assertHit(c.request("HIT " + pairs), True, 8, self.since_start(3600))
        with d.connect_admin() as c:
            self.assertTrue(c.request("PEEK " + pairs).startswith("OK allowed=true credit=7 "))
            self.assertTrue(c.request("EXPLAIN " + pairs).startswith("OK rule="))
        with d.connect_admin() as c:  # a connection's first byte decides its protocol
            c.send(harness.resp_command("PEEK", "path", "/probe", "user", "inspect"))
            self.assertEqual(c.readline(), "*6\r")
        # all (the default) answers them on every listener
        d2 = self.start_admin_daemon(args=["--inspect=all"])
        d2.start()
        self.assertTrue(d2.request("PEEK " + pairs).startswith("OK allowed=true credit=9 "))
        self.assertTrue(d2.request("EXPLAIN " + pairs, "unix").startswith("OK rule="))
        for d_ in (d, d2):
            self.assertEqual(d_.stop(), 0)
        bad = self.new_daemon(data_path("itest.ini"), notify=False, args=["--inspect=none"])
        bad.start(wait_ready=False)
        self.assertEqual(bad.wait_exit(), 2)
        self.assertIn("invalid value for --inspect", bad.log_text())

    def test_bad_admin_addresses_are_usage_errors(self):
        for bad in ("admin:", "admin:unix:", "admin:udp:127.0.0.1:1", "admin:admin:unix:/x",
                    "admin:tcp:127.0.0.1:0"):
            d = self.new_daemon(data_path("itest.ini"), listen=(), notify=False)
            d.args = ["--listen", bad]
            d.start(wait_ready=False)
            self.assertEqual(d.wait_exit(), 2, bad)
            self.assertIn("invalid value for --listen", d.log_text(), bad)
            self.assertIn("'%s'" % bad, d.log_text(), bad)
        # A mode is octal digits: strtoul() also took a sign or leading blanks ("+7", " 7").
        for opt, bad in (("--admin-unix-mode", "0999"), ("--admin-unix-mode", "+7"), ("--unix-mode", " 7"),
                         ("--unix-mode", "-0"), ("--unix-mode", "")):
            d = self.new_daemon(data_path("itest.ini"), notify=False, args=["%s=%s" % (opt, bad)])
            d.start(wait_ready=False)
            self.assertEqual(d.wait_exit(), 2, (opt, bad))
            self.assertIn("invalid value for %s" % opt, d.log_text(), (opt, bad))

    def activated(self, fdname):
        if not harness.socket_activate_path():
            self.skipTest("systemd-socket-activate not found (set SYSTEMD_SOCKET_ACTIVATE)")
        d = self.start_admin_daemon(activate=True, admin_fdname=fdname)
        d.start(wait_ready=False)
        # systemd-socket-activate starts divvyd at the first connection; this one is queued.
        c = None
        for _ in range(int(50 * harness.TIMEOUT_SCALE)):
            try:
                c = d.connect_admin()
                break
            except OSError:
                if not d.running():
                    self.fail("systemd-socket-activate exited: %s" % d.log_tail())
                d.drain_notes(0.1)
        self.assertIsNotNone(c, "nothing listening on %s" % d.admin_path)
        with c:
            d.wait_ready()
            self.assertHit(c.request("HIT path=/probe user=sa-%s" % fdname), True, 9, 3600)
        self.assertHit(d.request("HIT path=/probe user=sa-%s" % fdname, "unix"), True, 8,
                       self.since_start(3600))
        _, status = d.wait_note(re.compile(r"^STATUS=.*\brules\b"), what="STATUS")
        self.assertRegex(status, r"\b3 listeners\b")
        return d, [l for l in self.listening_lines(d) if "(socket activation)" in l]

    def test_socket_activation_admin_by_name(self):
        # fds 3, 4, 5: tcp, unix, admin (systemd-socket-activate's order of -l).
        d, lines = self.activated("admin")
        self.assertEqual(len(lines), 3, lines)
        self.assertTrue(any(l.endswith("Listening on fd 3 (tcp) (socket activation)") for l in lines), lines)
        self.assertTrue(any(l.endswith("Listening on fd 4 (unix) (socket activation)") for l in lines), lines)
        self.assertTrue(any(l.endswith("Listening on fd 5 (admin) [admin] (socket activation)") for l in lines),
                        lines)
        self.assertEqual(d.stop(), 0)

    def test_socket_activation_other_name_is_not_admin(self):
        d, lines = self.activated("divvyd")
        self.assertEqual(len(lines), 3, lines)
        self.assertEqual([l for l in lines if "admin" in l], [], lines)
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    harness.main()
