# SPDX-License-Identifier: MIT
"""Helpers for the hostile-client and fault tests (test_hostile.py, test_faults.py).

Standard library only. Everything here is bounded in time; nothing decides pass/fail on
timing (latency figures are printed as a benchmark, not asserted).
"""

import ctypes
import ctypes.util
import os
import resource
import signal
import socket
import struct
import subprocess
import threading
import time

import harness


def vmrss_kib(pid):
    """The process's resident set size in KiB (VmRSS from /proc)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise harness.HarnessError("no VmRSS for pid %d" % pid)


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def wait_for(pred, timeout, what, interval=0.05):
    """Polls pred() until it is true; raises HarnessError after timeout seconds (scaled)."""
    deadline = time.monotonic() + timeout * harness.TIMEOUT_SCALE
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise harness.HarnessError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def raise_nofile(n):
    """Raises this process's RLIMIT_NOFILE soft limit (and the hard one when root) to at least n;
    children (the daemon) inherit it. Returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= n:
        return soft
    if hard < n and os.geteuid() == 0:
        try:
            with open("/proc/sys/fs/nr_open") as f:
                nr_open = int(f.read())
            hard = min(max(hard, n), nr_open)
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            return hard
        except (OSError, ValueError):
            pass
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def reset_close(sock):
    """Closes with a TCP RST (SO_LINGER 0) instead of a FIN: an abortive disconnect."""
    try:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class LatencyProbe:
    """A well-behaved client in a thread: one request at a time on its own connection,
    recording each round trip. Its replies are checked; its latencies are only reported."""

    def __init__(self, daemon, line="HIT path=/open", expect="OK true 5 0", kind="tcp"):
        self.daemon = daemon
        self.line = line
        self.expect = expect
        self.kind = kind
        self.samples = []
        self.errors = []
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        try:
            with self.daemon.connect(self.kind) as c:
                while not self._stop.is_set() and len(self.samples) < 200000:
                    t0 = time.perf_counter()
                    r = c.request(self.line)
                    self.samples.append(time.perf_counter() - t0)
                    if r != self.expect:
                        self.errors.append(r)
                        return
                    time.sleep(0.001)  # a steady trickle, not a flood
        except Exception as e:  # reported by stop()
            self.errors.append(repr(e))

    def stop(self):
        self._stop.set()
        self._thread.join(harness.IO_TIMEOUT)
        return self

    def percentile(self, p):
        if not self.samples:
            return float("nan")
        s = sorted(self.samples)
        return s[min(len(s) - 1, int(len(s) * p / 100.0))]

    def summary(self):
        return "%d requests, p50 %.2f ms, p99 %.2f ms, max %.2f ms" % (
            len(self.samples), self.percentile(50) * 1e3, self.percentile(99) * 1e3,
            (max(self.samples) if self.samples else float("nan")) * 1e3)


def report(name, text):
    """A figure for the README's Reliability section: printed into the test log."""
    print("FIGURE %s: %s" % (name, text), flush=True)


# --- LMDB through ctypes, to plant a foreign database (stdlib only) ---------------------------

class _MDBVal(ctypes.Structure):
    _fields_ = [("mv_size", ctypes.c_size_t), ("mv_data", ctypes.c_void_p)]


def write_foreign_lmdb(directory, entries):
    """Creates a valid LMDB environment in directory whose unnamed database holds entries
    ({bytes: bytes}): a database, but not divvyd's. Returns False if liblmdb is missing."""
    name = ctypes.util.find_library("lmdb")
    if not name:
        return False
    lib = ctypes.CDLL(name)
    env, txn, dbi = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_uint()

    def ok(rc, what):
        if rc != 0:
            raise harness.HarnessError("%s failed: %d" % (what, rc))

    ok(lib.mdb_env_create(ctypes.byref(env)), "mdb_env_create")
    try:
        ok(lib.mdb_env_open(env, directory.encode(), 0, 0o600), "mdb_env_open")
        ok(lib.mdb_txn_begin(env, None, 0, ctypes.byref(txn)), "mdb_txn_begin")
        ok(lib.mdb_dbi_open(txn, None, 0, ctypes.byref(dbi)), "mdb_dbi_open")
        for k, v in entries.items():
            kb, vb = ctypes.create_string_buffer(k, len(k)), ctypes.create_string_buffer(v, len(v))
            key = _MDBVal(len(k), ctypes.cast(kb, ctypes.c_void_p))
            val = _MDBVal(len(v), ctypes.cast(vb, ctypes.c_void_p))
            ok(lib.mdb_put(txn, dbi, ctypes.byref(key), ctypes.byref(val), 0), "mdb_put")
        ok(lib.mdb_txn_commit(txn), "mdb_txn_commit")
    finally:
        lib.mdb_env_close(env)
    return True


# --- looking inside a frozen process (test_durability.py) -------------------------------------

def tasks(pid):
    """The thread ids of process pid (from /proc), as a set of ints; empty once it is gone."""
    try:
        return {int(t) for t in os.listdir("/proc/%d/task" % pid)}
    except OSError:
        return set()


def open_files(pid):
    """The paths process pid has open (its /proc fd links); a descriptor closed while we read
    is skipped. Empty once the process is gone."""
    out = []
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return out
    for fd in fds:
        try:
            out.append(os.readlink("/proc/%d/fd/%s" % (pid, fd)))
        except OSError:
            pass
    return out


def send_quietly(sock, payload, half_close=False):
    """sendall() (then a half-close if asked) that ignores the peer closing on us: it may,
    after an ERR."""
    try:
        sock.sendall(payload)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _task_state(pid, tid):
    try:
        with open("/proc/%d/task/%d/stat" % (pid, tid)) as f:
            # "tid (comm) S ...": the state follows the last ')' (comm may hold spaces or ')').
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def freeze(pid, timeout=None):
    """SIGSTOPs process pid and waits (bounded) until every thread of it is stopped ('T'), so
    that what /proc shows afterwards is the state the process was frozen in: a SIGKILL sent
    next lands exactly there. Raises HarnessError if the threads do not all stop in time."""
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: all(_task_state(pid, t) in ("T", "t", None) for t in tasks(pid)),
             timeout or 10, "pid %d to stop on SIGSTOP" % pid, interval=0.001)


def mount_tmpfs(test, path, size="8m", why_not_root=""):
    """Mounts a tmpfs of size on the empty directory path for the rest of test (unmounted at
    its cleanup); the test skips, loudly, when not root or when the mount fails."""
    if os.geteuid() != 0:
        test.skipTest("SKIPPED LOUDLY: not root, cannot mount a small tmpfs to fill up" +
                      (" (%s)" % why_not_root if why_not_root else ""))
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % size, "tmpfs", path],
                       capture_output=True, text=True)
    if r.returncode != 0:
        test.skipTest("SKIPPED LOUDLY: cannot mount a tmpfs here (%s)" % r.stderr.strip())
    test.addCleanup(subprocess.run, ["umount", "-l", path], capture_output=True)


def fill_filesystem(path, leave=0):
    """Writes the file path until its filesystem is full, then gives back `leave` bytes of it
    (truncating the file): a filesystem with exactly that much room. Returns the file's size."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        try:
            while os.write(fd, b"\0" * 65536) > 0:
                pass
        except OSError:
            pass
        size = max(0, os.fstat(fd).st_size - leave)
        os.ftruncate(fd, size)
        return size
    finally:
        os.close(fd)
