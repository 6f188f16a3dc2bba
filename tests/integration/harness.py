# SPDX-License-Identifier: MIT
"""Integration-test harness: starts the real divvyd on temporary state and talks to it.

Standard library only. A test file does:

    import harness
    class T(harness.DaemonTestCase):
        def test_x(self):
            d = self.start_daemon(harness.data_path("itest.ini"))
            with d.connect("tcp") as c:
                self.assertEqual(c.request("HIT path=/open"), "OK true 5 0")
    if __name__ == "__main__":
        harness.main()

Environment (set by `make check`, all optional):
  top_builddir, top_srcdir   where src/divvyd and the fixtures are (default: relative to this file)
  DIVVYD                     path of the daemon binary (overrides top_builddir)
  DIVVYD_WRAPPER             command prefix, e.g. "valgrind --error-exitcode=1 -q"
  DIVVYD_TIMEOUT_SCALE       multiply every timeout (slow machines, valgrind)
  SYSTEMD_SOCKET_ACTIVATE    path of systemd-socket-activate
  ITEST_KEEP                 keep temporary directories (prints their path)
  CI                         "true" in CI: a skipped test FAILS, unless it is marked
                             @harness.may_skip_in_ci(reason) (or skip_all(..., ci_ok=reason))

Every skip prints "SKIP: <test id>: <reason>", every known bug "XFAIL: <test id>: <reason>"
(.ci/run collects both lines from the logs into its summary). A known bug is a test that
fails inside `with self.known_bug("..."):`: reported as an expected failure; when the block
unexpectedly passes, the test FAILS (strict), so a fix is noticed and the marker removed.

Every wait is bounded; no pass/fail decision depends on timing.
"""

import fcntl
import os
import re
import select
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))

# Seconds; generous because sanitizer builds start slowly. Scaled by DIVVYD_TIMEOUT_SCALE.
TIMEOUT_SCALE = float(os.environ.get("DIVVYD_TIMEOUT_SCALE", "1") or "1")
if os.environ.get("DIVVYD_WRAPPER") and "DIVVYD_TIMEOUT_SCALE" not in os.environ:
    TIMEOUT_SCALE = 10.0  # valgrind is ~10-50x slower
START_TIMEOUT = 15.0 * TIMEOUT_SCALE  # daemon start until READY=1
IO_TIMEOUT = 10.0 * TIMEOUT_SCALE  # one socket operation
STOP_TIMEOUT = 10.0 * TIMEOUT_SCALE  # SIGTERM until exit, then SIGKILL

# In CI every test is meant to run: CI installs each tool and runs as root.
IN_CI = os.environ.get("CI") == "true"

UNIX_PATH_MAX = 107  # bytes: sun_path is 108 including the NUL


def top_srcdir():
    return os.environ.get("top_srcdir") or os.path.normpath(os.path.join(HERE, "..", ".."))


def top_builddir():
    return os.environ.get("top_builddir") or os.path.normpath(os.path.join(HERE, "..", ".."))


def divvyd_path():
    if os.environ.get("DIVVYD"):
        return os.environ["DIVVYD"]
    return os.path.join(top_builddir(), "src", "divvyd")


def data_path(name):
    """A fixture of this suite (tests/data/NAME)."""
    return os.path.join(top_srcdir(), "tests", "data", name)


def example_path(name):
    return os.path.join(top_srcdir(), "examples", name)


def socket_activate_path():
    p = os.environ.get("SYSTEMD_SOCKET_ACTIVATE")
    if p and os.access(p, os.X_OK):
        return p
    for p in ("/usr/bin/systemd-socket-activate", "/bin/systemd-socket-activate",
              "/lib/systemd/systemd-activate", shutil.which("systemd-socket-activate")):
        if p and os.access(p, os.X_OK):
            return p
    return None


def free_tcp_port():
    """A port the kernel just handed out for 127.0.0.1 (free now; tiny race accepted)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_tmpdir():
    base = os.environ.get("TMPDIR") or "/tmp"
    # Keep room for "/notify" and "/divvyd.sock" under sun_path's 108 bytes.
    if len(base) > 60:
        base = "/tmp"
    return tempfile.mkdtemp(prefix="divvyd-it-", dir=base)


class HarnessError(Exception):
    pass


class KnownBug(Exception):
    """Raised by DaemonTestCase.known_bug() when the known bug showed: an expected failure."""


class FakeClock:
    """tests/integration/fakeclock.c compiled (cc -shared) into tmpdir, for a daemon preloaded
    with it: env() is the environment to start it with, set(ns) freezes its CLOCK_REALTIME at ns
    since the epoch (0: the real clock again). Raises HarnessError if it cannot be compiled."""

    def __init__(self, tmpdir):
        cc = os.environ.get("CC", "cc").split()
        self.lib = os.path.join(tmpdir, "fakeclock.so")
        src = os.path.join(top_srcdir(), "tests", "integration", "fakeclock.c")
        try:
            subprocess.run(cc + ["-shared", "-fPIC", "-o", self.lib, src, "-ldl"], check=True,
                           timeout=60 * TIMEOUT_SCALE, capture_output=True)
        except (OSError, subprocess.SubprocessError) as e:
            raise HarnessError("cannot compile fakeclock.c: %s" % e)
        self.path = os.path.join(tmpdir, "clock")
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self.set(0)

    def env(self):
        return {"LD_PRELOAD": self.lib, "FAKECLOCK_FILE": self.path,
                "ASAN_OPTIONS": ":".join(filter(None, [os.environ.get("ASAN_OPTIONS", ""),
                                                      "verify_asan_link_order=0"]))}

    def set(self, ns):
        os.pwrite(self.fd, struct.pack("<q", ns), 0)

    def close(self):
        os.close(self.fd)


def may_skip_in_ci(reason):
    """Decorator for a test (or a class) whose skip is acceptable even in CI, with the reason
    why CI cannot run it. Without it, a skip under CI=true is a failure."""
    def mark(obj):
        obj.__ci_may_skip__ = reason
        return obj
    return mark


def run_by(program):
    """Decorator for a test class whose tests another program runs (program: its file name,
    e.g. "test_durability_kill.py", which imports the class): a file's long tests split off
    so that make -j runs them beside the rest. main() of the file that defines the class
    leaves them out, unless they are named on its command line."""
    def mark(cls):
        cls.__run_by__ = program
        return cls
    return mark


def _tests(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _tests(t)
        else:
            yield t


def test_name(test):
    """file.py:Class.test_x, as the SKIP and XFAIL lines name a test."""
    return test.id().replace(type(test).__module__ + ".", os.path.basename(sys.argv[0]) + ":", 1)


def ci_skip_allowed(test):
    """The reason why test may skip in CI, or None."""
    method = getattr(test, getattr(test, "_testMethodName", ""), None)
    return getattr(method, "__ci_may_skip__", None) or getattr(type(test), "__ci_may_skip__", None)


def elapsed_bounds(reset, t0, t1=None):
    """(lo, hi) for a reset that was exactly `reset` at some moment between monotonic times t0
    and t1 (default: now): since then the daemon's whole-second clock advanced by at most
    int(t1 - t0) + 1 seconds (>= ceil). Bounds from measured time, never a fixed slack."""
    t1 = time.monotonic() if t1 is None else t1
    return reset - (int(t1 - t0) + 1), reset


class Conn:
    """A client connection with line helpers; every read is bounded by a timeout."""

    def __init__(self, sock, timeout=None):
        self.sock = sock
        self.timeout = IO_TIMEOUT if timeout is None else timeout
        self.sock.settimeout(self.timeout)
        self.buf = b""
        self.eof = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data):
        if isinstance(data, str):
            data = data.encode()
        self.sock.sendall(data)

    def shutdown_write(self):
        self.sock.shutdown(socket.SHUT_WR)

    def _fill(self):
        """Reads more bytes into buf. Returns False at EOF (or reset). Raises socket.timeout."""
        if self.eof:
            return False
        try:
            chunk = self.sock.recv(65536)
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def readline(self):
        """The next reply line without "\\n", or None at EOF. Raises socket.timeout."""
        while b"\n" not in self.buf:
            if not self._fill():
                if self.buf:
                    line, self.buf = self.buf, b""
                    return line.decode("utf-8", "replace")
                return None
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode("utf-8", "replace")

    def readlines(self, n):
        """Up to n lines; fewer only if EOF came first."""
        out = []
        # One pass over big chunks: faster than readline() for thousands of lines.
        while len(out) < n:
            if b"\n" in self.buf:
                parts = self.buf.split(b"\n")
                self.buf = parts.pop()
                take = parts[: n - len(out)]
                out.extend(p.decode("utf-8", "replace") for p in take)
                if len(take) < len(parts):
                    rest = b"\n".join(parts[len(take):]) + b"\n"
                    self.buf = rest + self.buf
                continue
            if not self._fill():
                if self.buf:
                    out.append(self.buf.decode("utf-8", "replace"))
                    self.buf = b""
                break
        return out

    def read_until_eof(self, max_bytes=64 << 20):
        """Every remaining line until the peer closes. Raises socket.timeout if it never does."""
        while self._fill():
            if len(self.buf) > max_bytes:
                raise HarnessError("more than %d bytes without EOF" % max_bytes)
        data, self.buf = self.buf, b""
        lines = data.decode("utf-8", "replace").split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return lines

    def at_eof(self):
        """True if the peer closed the connection (waits up to the timeout for it)."""
        if self.buf:
            return False
        return not self._fill()

    def request(self, line):
        """Sends one request line, returns its reply (None at EOF)."""
        self.send(line + "\n")
        return self.readline()

    def pipeline(self, lines):
        """Sends all lines in ONE write while a thread reads; returns the replies."""
        payload = "".join(l + "\n" for l in lines).encode()
        err = []

        def writer():
            try:
                self.sock.sendall(payload)
            except OSError as e:  # pragma: no cover - reported below
                err.append(e)

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        replies = self.readlines(len(lines))
        t.join(self.timeout)
        if err:
            raise err[0]
        return replies


class Daemon:
    """One divvyd process on a temporary directory.

    kind of listeners: "tcp" on 127.0.0.1:<free port>, "unix" at <tmp>/divvyd.sock.
    Notifications (sd_notify) are received on a datagram socket at <tmp>/notify and kept
    in self.notes, a list of (seq, "KEY=VALUE") in arrival order.
    """

    def __init__(self, config, args=(), env=None, listen=("tcp", "unix"), db=None, tmpdir=None,
                 notify=True, activate=False):
        self.config = config
        self.args = list(args)
        self.extra_env = dict(env or {})
        self.listen = tuple(listen)
        self.own_tmp = tmpdir is None
        self.tmpdir = tmpdir or make_tmpdir()
        self.db = os.path.join(self.tmpdir, "db") if db is None else db
        self.unix_path = os.path.join(self.tmpdir, "divvyd.sock")
        self.notify_path = os.path.join(self.tmpdir, "notify")
        self.log_path = os.path.join(self.tmpdir, "divvyd.log")
        self.port = None
        self.proc = None
        self.start_seq = 0
        self.notes = []
        self.note_seq = 0
        self.notify_sock = None
        self.use_notify = notify
        self.activate = activate
        self.returncode = None
        self.started_at = None
        self.stopped_at = None

    # --- lifecycle -------------------------------------------------------------------------

    def command(self):
        cmd = shlex.split(os.environ.get("DIVVYD_WRAPPER", "")) + [divvyd_path()]
        if os.geteuid() == 0:  # the daemon refuses root unless told (CI runs tests as root)
            cmd.append("--allow-root")
        if self.db is not False:  # False: no --db (STATE_DIRECTORY or the default)
            cmd += ["--db", self.db]
        if not self.activate:
            if "tcp" in self.listen:
                cmd += ["--listen", "tcp:127.0.0.1:%d" % self.port]
            if "unix" in self.listen:
                cmd += ["--listen", "unix:" + self.unix_path]
        return cmd + self.args + [self.config]

    def start(self, wait_ready=True):
        if self.port is None:
            self.port = free_tcp_port()
        if self.use_notify and self.notify_sock is None:
            if os.path.exists(self.notify_path):
                os.unlink(self.notify_path)
            self.notify_sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self.notify_sock.bind(self.notify_path)
        env = dict(os.environ)
        for k in ("LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "WATCHDOG_USEC",
                  "WATCHDOG_PID", "PORT", "STATE_DIRECTORY", "DEBUG"):
            env.pop(k, None)
        if self.use_notify:
            env["NOTIFY_SOCKET"] = self.notify_path
        env.update(self.extra_env)
        cmd = self.command()
        if self.activate:
            sa = socket_activate_path()
            # systemd-socket-activate passes only the variables named with -E.
            pass_env = ["NOTIFY_SOCKET"] + sorted(self.extra_env)
            cmd = [sa, "-l", "127.0.0.1:%d" % self.port, "-l", self.unix_path,
                   "--fdname=tcp:unix"] + [a for k in pass_env for a in ("-E", k)] + cmd
        self.start_seq = self.last_seq()
        self.log = open(self.log_path, "ab")
        self.started_at = time.monotonic()
        self.stopped_at = None
        self.returncode = None
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env, close_fds=True)
        if wait_ready:
            self.wait_ready()
        return self

    def wait_ready(self, timeout=None):
        """Waits for READY=1 (needs notify=True). Raises HarnessError with the log tail."""
        if not self.use_notify:
            raise HarnessError("wait_ready() needs the notify socket")
        timeout = timeout or START_TIMEOUT
        deadline = time.monotonic() + timeout
        self.wait_note("READY=1", after=self.start_seq, timeout=timeout, what="READY=1 at start")
        # READY=1 arrives while sd_notify() still holds its socket: wait for its close, so a
        # test counting the daemon's descriptors from here on counts no passing one.
        while self.notifying():
            if time.monotonic() > deadline:
                raise HarnessError("divvyd kept its notification socket open after READY=1\n%s" %
                                   self.log_tail())
            time.sleep(0.001)

    def notifying(self):
        """True while the process holds an unnamed AF_UNIX datagram socket: sd_notify()'s,
        open only while it sends (the daemon keeps no other). False once it exited."""
        try:
            fd_dir = "/proc/%d/fd" % self.proc.pid
            inodes = set()
            for fd in os.listdir(fd_dir):
                try:
                    target = os.readlink(os.path.join(fd_dir, fd))
                except OSError:  # closed meanwhile
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:["):-1])
            with open("/proc/net/unix") as f:
                rows = [line.split() for line in f.readlines()[1:]]
        except OSError:  # exited
            return False
        # Num RefCount Protocol Flags Type St Inode [Path]; Type 0002: SOCK_DGRAM
        return any(len(r) == 7 and r[4] == "0002" and r[6] in inodes for r in rows)

    def stop(self, sig=signal.SIGTERM, timeout=None):
        """Sends sig, waits (bounded) for exit, SIGKILLs as a last resort. Returns the exit
        status (negative: killed by that signal)."""
        if self.proc is None:
            return self.returncode
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout or STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
                self.returncode = "killed after timeout"
                self._after_exit()
                return self.returncode
        self.returncode = self.proc.returncode
        self._after_exit()
        return self.returncode

    def wait_exit(self, timeout=None):
        """Waits (bounded) for the process to exit by itself; returns its status."""
        try:
            self.proc.wait(timeout or STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise HarnessError("divvyd did not exit within %.0fs\n%s" %
                               (timeout or STOP_TIMEOUT, self.log_tail()))
        self.returncode = self.proc.returncode
        self._after_exit()
        return self.returncode

    def _after_exit(self):
        self.stopped_at = time.monotonic()
        self.drain_notes(0)
        self.proc = None
        try:
            self.log.close()
        except Exception:
            pass

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def pid(self):
        return self.proc.pid

    def signal(self, sig):
        self.proc.send_signal(sig)

    def cleanup(self):
        """Stops the daemon if still running and removes the temp dir. Raises HarnessError if
        that stop did not end in exit status 0 (a crash during the test, a sanitizer or
        valgrind report at exit), so no test passes over it."""
        rc = 0
        if self.proc is not None:
            rc = self.stop()
        tail = self.log_tail() if rc != 0 else ""
        self._remove()
        if rc != 0:
            raise HarnessError("divvyd exit status %s when stopped at cleanup\n%s" % (rc, tail))

    def _remove(self):
        if self.notify_sock is not None:
            self.notify_sock.close()
            self.notify_sock = None
        if self.own_tmp:
            if os.environ.get("ITEST_KEEP"):
                print("kept %s" % self.tmpdir)
            else:
                shutil.rmtree(self.tmpdir, ignore_errors=True)

    # --- notifications ---------------------------------------------------------------------

    def drain_notes(self, timeout, first=False):
        """Receives datagrams for up to timeout seconds (0: only what is queued). With first,
        returns as soon as one came (and what was queued behind it is read)."""
        if self.notify_sock is None:
            return
        deadline = time.monotonic() + timeout
        while True:
            left = max(0.0, deadline - time.monotonic())
            r, _, _ = select.select([self.notify_sock], [], [], left)
            if not r:
                return
            data = self.notify_sock.recv(65536)
            for line in data.decode("utf-8", "replace").split("\n"):
                if line:
                    self.note_seq += 1
                    self.notes.append((self.note_seq, line))
            if first:
                deadline = 0

    def drain_notes_in_background(self, test):
        """Keeps receiving notifications in a thread, as systemd would, until the returned
        function is called (or the test ends): sd_notify() blocks once the notify socket's
        queue is full (net.unix.max_dgram_qlen, 10 here), so a test that sends many SIGHUPs
        or runs long must keep reading it. Notes still land in self.notes."""
        stop = threading.Event()

        def drain():
            while not stop.is_set():
                self.drain_notes(0.05)

        t = threading.Thread(target=drain, daemon=True)
        t.start()

        def finish():
            stop.set()
            t.join(IO_TIMEOUT)

        test.addCleanup(finish)
        return finish

    def wait_note(self, pattern, after=0, timeout=None, what=None):
        """Waits for a notification matching pattern (exact "KEY=VALUE" or a compiled regex)
        with seq > after. Returns (seq, line). Raises HarnessError with the log tail, also
        as soon as the process exits without sending it."""
        timeout = IO_TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + timeout

        def find():
            for seq, line in self.notes:
                if seq <= after:
                    continue
                if (pattern.search(line) if hasattr(pattern, "search") else line == pattern):
                    return seq, line
            return None

        while True:
            hit = find()
            if hit:
                return hit
            left = deadline - time.monotonic()
            if left <= 0:
                break
            if self.proc is not None and self.proc.poll() is not None:
                self.drain_notes(0)
                hit = find()
                if hit:
                    return hit
                raise HarnessError("divvyd exited (status %s) before %s\n%s" %
                                   (self.proc.returncode, what or pattern, self.log_tail()))
            self.drain_notes(min(left, 0.2), first=True)
        raise HarnessError("no %s within %.0fs; notifications: %r\n%s" %
                           (what or getattr(pattern, "pattern", pattern), timeout,
                            [l for _, l in self.notes][-20:], self.log_tail()))

    def last_seq(self):
        self.drain_notes(0)
        return self.note_seq

    def note_lines(self):
        return [l for _, l in self.notes]

    # --- clients ---------------------------------------------------------------------------

    def connect(self, kind="tcp", timeout=None):
        if kind == "tcp":
            s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout or IO_TIMEOUT)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        elif kind == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout or IO_TIMEOUT)
            s.connect(self.unix_path)
        else:
            raise ValueError(kind)
        return Conn(s, timeout)

    def request(self, line, kind="tcp"):
        """One request on a fresh connection."""
        with self.connect(kind) as c:
            return c.request(line)

    # --- logs ------------------------------------------------------------------------------

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, n=30):
        lines = self.log_text().splitlines()[-n:]
        return "---- divvyd log (%s, last %d lines) ----\n%s\n----" % (self.log_path, len(lines),
                                                                       "\n".join(lines))


# --- the kernel's view of a socket ------------------------------------------------------------

def unix_peer_unread(sock):
    """For a connected Unix stream socket of ours: how many bytes we sent sit unread in the
    peer's (e.g. the daemon's) receive queue. Exact, from the kernel (ss -x: the Recv-Q of the
    socket whose peer is ours), not from timing. Raises HarnessError if ss is missing or the
    peer is not found."""
    ss = shutil.which("ss")
    if not ss:
        raise HarnessError("ss (iproute2) not found")
    ino = str(os.fstat(sock.fileno()).st_ino)
    out = subprocess.run([ss, "-xanH"], capture_output=True, text=True, timeout=IO_TIMEOUT).stdout
    for line in out.splitlines():
        f = line.split()
        # Netid State Recv-Q Send-Q Local-path Local-inode Peer Peer-inode
        if len(f) >= 8 and f[0] == "u_str" and f[-1] == ino:
            return int(f[2])
    raise HarnessError("no Unix socket with peer inode %s in ss -x" % ino)


def unix_sent_unread(sock):
    """For a connected Unix stream socket of ours: non-zero while the peer has not read all we
    sent, 0 once it has (TIOCOUTQ, no subprocess: cheap enough to ask after every byte). The
    kernel counts its buffers, not payload bytes: only 0 is exact (unix_peer_unread() counts
    bytes)."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]


# --- RESP requests and raw replies -------------------------------------------------------------

def resp_command(*args):
    """One RESP request (bytes) of the given arguments (str or bytes)."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def read_until_close(sock, reset_ends=False):
    """Everything the peer sends until it closes (bounded by the socket's timeout). With
    reset_ends, a reset ends it too (a peer that closes with our input unread resets)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            if not reset_ends:
                raise
            return data
        if not chunk:
            return data
        data += chunk


# --- the daemon's HTTP endpoint (--http-port) -------------------------------------------------

def http_get(port, path="/metrics"):
    """GET http://127.0.0.1:port/path: (status, Content-Type, body). Raises HTTPError on a
    status other than 2xx, OSError when nothing answers within IO_TIMEOUT."""
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=IO_TIMEOUT) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def prometheus_samples(text):
    """{'name{labels}': value} of a Prometheus text page (a sample without labels: 'name')."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, value = line.rsplit(" ", 1)
        out[key] = float(value)
    return out


# --- checks shared by the test files ----------------------------------------------------------

OK_RE = re.compile(r"^OK (true|false) (\d+) (-?\d+)$")


def parse_ok(reply):
    """("OK true 9 3600") -> (True, 9, 3600); None if it is not an OK reply."""
    m = OK_RE.match(reply or "")
    if not m:
        return None
    return m.group(1) == "true", int(m.group(2)), int(m.group(3))


class DaemonTestCase(unittest.TestCase):
    """Base class: start_daemon() registers cleanup and shows the log tail on failure."""

    maxDiff = 4000

    @staticmethod
    def _daemon(add_cleanup, config, start, **kw):
        d = Daemon(config, **kw)
        add_cleanup(d.cleanup)
        _DAEMONS.append(d)
        if start:
            d.start(wait_ready=kw.get("notify", True))
        return d

    def start_daemon(self, config, **kw):
        """A started daemon (READY=1 seen), stopped and checked at the end of the test."""
        return self._daemon(self.addCleanup, config, True, **kw)

    @classmethod
    def start_shared_daemon(cls, config, **kw):
        """One daemon for every test of the class (from setUpClass); stopped after them."""
        return cls._daemon(cls.addClassCleanup, config, True, **kw)

    @classmethod
    def start_shared_daemon_on_clock(cls, config, clock_ns, **kw):
        """start_shared_daemon() of a daemon whose wall clock the tests set: cls.clock, a
        FakeClock set to clock_ns (0: the real clock) before it starts."""
        tmp = make_tmpdir()
        cls.addClassCleanup(shutil.rmtree, tmp, True)
        cls.clock = FakeClock(tmp)
        cls.addClassCleanup(cls.clock.close)
        cls.clock.set(clock_ns)
        return cls.start_shared_daemon(config, tmpdir=tmp, env=cls.clock.env(), **kw)

    def new_daemon(self, config, **kw):
        """Like start_daemon() without starting it."""
        return self._daemon(self.addCleanup, config, False, **kw)

    def assertHit(self, reply, allowed, credit, reset, msg=None):
        """Exact allowed/credit; reset exact when given an int, else a (lo, hi) range."""
        got = parse_ok(reply)
        self.assertIsNotNone(got, "not an OK reply: %r %s" % (reply, msg or ""))
        self.assertEqual(got[:2], (allowed, credit), "reply %r %s" % (reply, msg or ""))
        if isinstance(reset, tuple):
            lo, hi = reset
            self.assertTrue(lo <= got[2] <= hi, "reset %d not in [%d, %d]: %r %s" %
                            (got[2], lo, hi, reply, msg or ""))
        else:
            self.assertEqual(got[2], reset, "reply %r %s" % (reply, msg or ""))

    def assertWindow(self, replies, limit, reset, start_credit=None, msg="", t0=None):
        """A transcript of hits on one fresh counter: credits count down from limit-1 (or
        start_credit) to 0 and then stay 0 with allowed false; the first reset is exactly
        reset, later ones within elapsed_bounds(reset, t0) where t0 is the monotonic time
        before the first hit was sent (default: the start of the test)."""
        credit = limit - 1 if start_credit is None else start_credit
        later = elapsed_bounds(reset, self._t_start if t0 is None else t0)
        for i, r in enumerate(replies):
            first = i == 0 and start_credit is None
            self.assertHit(r, credit >= 0, max(credit, 0), reset if first else later,
                           "hit #%d %s" % (i + 1, msg))
            credit -= 1

    def since_start(self, reset):
        """elapsed_bounds(reset) from the start of this test: for a counter first hit in it."""
        return elapsed_bounds(reset, self._t_start)

    def setUp(self):
        super().setUp()
        self._t_start = time.monotonic()

    class _KnownBugBlock:
        def __init__(self, case, reason):
            self.case, self.reason = case, reason

        def __enter__(self):
            return self

        def __exit__(self, etype, e, tb):
            if etype is None:
                self.case.fail("XPASS (strict): the known bug no longer shows: %s; remove the "
                               "known_bug() marker and restore the claim in the README" % self.reason)
            if issubclass(etype, (AssertionError, HarnessError)):
                raise KnownBug("%s (%s)" % (self.reason, e)) from e
            return False

    def known_bug(self, reason):
        """with self.known_bug("..."): the checks of a bug not fixed yet. A failure inside is
        an expected failure (XFAIL); a pass is a failure (XPASS, strict). Checks before and
        after the block fail the test as usual."""
        return self._KnownBugBlock(self, reason)


_DAEMONS = []


class _Result(unittest.TextTestResult):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.passed = 0
        self.known_bugs = []
        self.skip_lines = []
        self._t0 = time.monotonic()

    def _daemon_logs(self):
        out = []
        for d in _DAEMONS:
            if d.started_at is not None and (d.running() or (d.stopped_at or 0) >= self._t0) and \
                    d.log_text():
                out.append(d.log_tail())
        return "\n".join(out)

    def startTest(self, test):
        self._t0 = time.monotonic()
        super().startTest(test)

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed += 1

    def _append_logs(self, entries):
        logs = self._daemon_logs()
        if logs:
            entries[-1] = (entries[-1][0], entries[-1][1] + "\n" + logs)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._append_logs(self.failures)

    def addError(self, test, err):
        if err[0] is not None and issubclass(err[0], KnownBug):
            self.known_bugs.append((test, str(err[1])))
            self.addExpectedFailure(test, err)
            return
        super().addError(test, err)
        self._append_logs(self.errors)

    def addSkip(self, test, reason):
        allowed = ci_skip_allowed(test)
        if IN_CI and not allowed:
            self.skip_lines.append("SKIP: %s: %s (FAILED: CI=true, and CI is meant to run it)" %
                                   (test_name(test), reason))
            try:
                raise HarnessError("skipped in CI (CI=true): %s; CI is meant to run this test "
                                   "(mark it @harness.may_skip_in_ci(reason) if it cannot)" % reason)
            except HarnessError:
                super().addFailure(test, sys.exc_info())
            return
        self.skip_lines.append("SKIP: %s: %s%s" % (test_name(test), reason,
                                                    " (allowed in CI: %s)" % allowed if allowed else ""))
        super().addSkip(test, reason)


def skip_all(reason, ci_ok=None):
    """Ends a test file that cannot run at all: automake's SKIP. Under CI=true a FAILURE
    (exit 1), unless ci_ok gives the reason why CI cannot run it."""
    name = os.path.basename(sys.argv[0])
    if IN_CI and not ci_ok:
        print("SKIP: %s: %s (FAILED: CI=true, and CI is meant to run it)" % (name, reason))
        print("0 passed, 1 failed, 0 skipped")
        sys.exit(1)
    print("SKIP: %s: %s%s" % (name, reason, " (allowed in CI: %s)" % ci_ok if ci_ok else ""))
    print("0 passed, 0 failed, 0 skipped")
    sys.exit(77)


NPM_TIMEOUT = 90  # seconds: a cold install of a few small packages; no registry: skip


def npm_install(pkg_dir, dest, marker, what):
    """Installs the packages pinned in pkg_dir (package.json + package-lock.json) with `npm ci`
    into dest, unless dest/node_modules/marker exists. Returns the node_modules directory, or
    calls skip_all() with the reason (node or npm missing, no registry, a failed install)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node:
        skip_all("node not found: install Node.js to run the %s test" % what)
    if not npm:
        skip_all("npm not found: install npm to run the %s test" % what)
    modules = os.path.join(dest, "node_modules")
    if os.path.exists(os.path.join(modules, marker)):
        return modules
    os.makedirs(dest, exist_ok=True)
    for f in ("package.json", "package-lock.json"):
        shutil.copyfile(os.path.join(pkg_dir, f), os.path.join(dest, f))
    cmd = [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--fetch-retries=1",
           "--fetch-timeout=20000"]
    print("installing the %s: %s (in %s)" % (what, " ".join(cmd), dest))
    try:
        p = subprocess.run(cmd, cwd=dest, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=NPM_TIMEOUT)
    except subprocess.TimeoutExpired:
        skip_all("npm ci timed out after %ds (no registry access?)" % NPM_TIMEOUT)
    if p.returncode != 0 or not os.path.exists(os.path.join(modules, marker)):
        print(p.stdout.decode("utf-8", "replace")[-3000:])
        skip_all("npm ci failed (exit %d): cannot install the %s" % (p.returncode, what))
    return modules


def main(require_daemon=True):
    """unittest main: runs the file's tests (or those named in argv, e.g. T.test_x), prints
    "N passed, N failed, N skipped" as the last line, exits 0, 1, or 77 if nothing can run."""
    if require_daemon and not os.access(divvyd_path(), os.X_OK):
        skip_all("daemon binary %s not found (build it first: make src/divvyd)" % divvyd_path())
    loader = unittest.TestLoader()
    module = sys.modules["__main__"]
    names = sys.argv[1:]
    if names:
        suite = loader.loadTestsFromNames(names, module)
    else:
        me = os.path.basename(sys.argv[0])
        suite = unittest.TestSuite(t for t in _tests(loader.loadTestsFromModule(module))
                                   if getattr(type(t), "__run_by__", me) == me)
    runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=_Result)
    result = runner.run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = result.passed
    sys.stdout.flush()
    # One line per skip and per known bug, by name: automake's summary shows neither.
    for line in result.skip_lines:
        print(line)
    for test, reason in result.known_bugs:
        print("XFAIL: %s: %s" % (test_name(test), reason))
    xfail = " (%d known bugs, XFAIL)" % len(result.known_bugs) if result.known_bugs else ""
    print("%d passed, %d failed, %d skipped%s" % (passed, failed, skipped, xfail))
    sys.stdout.flush()
    if failed:
        sys.exit(1)
    if passed == 0 and skipped > 0:
        sys.exit(77)
    sys.exit(0)
