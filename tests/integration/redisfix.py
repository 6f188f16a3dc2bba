# SPDX-License-Identifier: MIT
"""Redis fixtures for the integration tests of the Redis store (issue #16): real redis-server,
redis-sentinel and Redis Cluster processes on free loopback ports and Unix sockets in temporary
directories, stopped by pid. Every wait is bounded; every process is killed on exit of the
`with` block, also when the test failed.

    import harness, redisfix
    with redisfix.RedisServer() as r:             # 127.0.0.1:<free port>, --save '' ...
        r.client().set("k", "v")
        r.kill()                                   # kill -9
        r.start()                                  # again, same port
    with redisfix.Sentinels() as s:                # primary + replica + 3 sentinels
        old = s.primary_address()
        new = s.failover()                         # SENTINEL FAILOVER, waits for all 3 to agree
    with redisfix.SentinelEvents(s) as ev:         # +switch-master ... as read, with times
        load = redisfix.HitLoad(daemon, "HIT ...")  # 100 HITs/s on one connection
        lost = redisfix.count_decrements(...)      # acknowledged vs the counter afterwards
    with redisfix.Cluster() as c:                  # 3 primaries, cluster_state:ok
        c.migrate_slot(slot, c.nodes[1])          # SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE

missing() names what is not installed (redis-server, redis-sentinel, redis-cli, Python's redis
module): a test file calls harness.skip_all(redisfix.missing()) when it returns a reason.

The client is Debian's python3-redis (4.3.4). When the python3 running the tests is not
Debian's (a pyenv one), the module is looked for in Debian's dist-packages as well.
"""

import binascii
import fnmatch
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import harness
from harness import HarnessError

try:
    import redis
except ImportError:  # a python3 of its own (pyenv): Debian's python3-redis is pure Python
    for _d in ("/usr/lib/python3/dist-packages",):
        if os.path.isdir(os.path.join(_d, "redis")) and _d not in sys.path:
            sys.path.append(_d)
    try:
        import redis
    except ImportError:
        redis = None

# Seconds, scaled like the harness's.
START_TIMEOUT = 10.0 * harness.TIMEOUT_SCALE  # a server until it answers PING
STOP_TIMEOUT = harness.STOP_TIMEOUT  # SIGTERM until exit, then SIGKILL
IO_TIMEOUT = harness.IO_TIMEOUT  # one command of the fixtures' clients
SYNC_TIMEOUT = 20.0 * harness.TIMEOUT_SCALE  # a replica's first sync, sentinels finding each other
FAILOVER_TIMEOUT = 45.0 * harness.TIMEOUT_SCALE  # a failover until every sentinel reports it
CLUSTER_TIMEOUT = 30.0 * harness.TIMEOUT_SCALE  # cluster creation, a slot's new owner agreed on
POLL = 0.05  # seconds between two polls of a bounded wait

CLUSTER_SLOTS = 16384


def missing():
    """None if every tool the fixtures need is here, else why not (for harness.skip_all())."""
    for prog in ("redis-server", "redis-sentinel", "redis-cli"):
        if not shutil.which(prog):
            return "%s not found (Debian: apt-get install redis-server redis-sentinel redis-tools)" % prog
    if redis is None:
        return "Python's redis module not found (Debian: apt-get install python3-redis)"
    return None


class Fatal(HarnessError):
    """Raised by a wait_until() predicate when waiting longer is pointless (the process died)."""


def wait_until(pred, timeout, what, tail=None):
    """Polls pred() until it returns something true (returned), for at most timeout seconds;
    raises HarnessError naming what (and tail(): a log) otherwise. Errors of pred() count as
    "not yet" (a server still starting refuses connections) and the last one is reported;
    Fatal ends the wait at once."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except Fatal:
            raise
        except (redis.RedisError if redis else OSError, OSError, HarnessError) as e:
            last = e
        if time.monotonic() >= deadline:
            raise HarnessError("no %s within %.0fs%s%s" % (what, timeout,
                                                           " (last error: %s)" % last if last else "",
                                                           "\n" + tail() if tail else ""))
        time.sleep(POLL)


# --- hash slots (the same rule as src/store/redis-cluster.c, for choosing keys) ---------------

def key_slot(key):
    """The cluster hash slot of key (str or bytes): CRC16-XMODEM of its {tag} or of it."""
    if isinstance(key, str):
        key = key.encode()
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1:end]
    return binascii.crc_hqx(key, 0) % CLUSTER_SLOTS


def key_in_slot(slot, prefix="k"):
    """A key (str) "<prefix>:<n>" whose slot is slot (the first n that fits; bounded)."""
    for n in range(CLUSTER_SLOTS * 64):
        k = "%s:%d" % (prefix, n)
        if key_slot(k) == slot:
            return k
    raise HarnessError("no key for slot %d" % slot)  # pragma: no cover - CRC16 covers every slot


# --- one process ---------------------------------------------------------------------------------

class _Process:
    """A server process started from a config file in its own directory, logging to a file."""

    program = "redis-server"

    def __init__(self, tmpdir, name):
        self.name = name
        self.dir = os.path.join(tmpdir, name)
        os.makedirs(self.dir, exist_ok=True)
        self.conf_path = os.path.join(self.dir, name + ".conf")
        self.log_path = os.path.join(self.dir, name + ".log")
        self.proc = None
        self.env = None  # more environment variables (e.g. harness.FakeClock's env())

    def write_config(self):
        raise NotImplementedError

    def _spawn(self):
        if self.running():
            raise HarnessError("%s already running (pid %d)" % (self.name, self.proc.pid))
        self.write_config()
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen([shutil.which(self.program) or self.program, self.conf_path],
                                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.dir, close_fds=True,
                                         env=dict(os.environ, **self.env) if self.env else None)
        finally:
            log.close()

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def stop(self, sig=signal.SIGTERM, timeout=None):
        """Sends sig, waits (bounded) for the exit, SIGKILL as a last resort. Returns the exit
        status (None if it was not running)."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(STOP_TIMEOUT if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT)
        return proc.returncode

    def kill(self):
        """kill -9: no shutdown, no goodbye to clients."""
        return self.stop(signal.SIGKILL)

    def pause(self):
        """SIGSTOP: alive but silent (a hung server); resume() undoes it."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def log_tail(self, n=30):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()[-n:]
        except OSError:
            lines = []
        return "---- %s log (%s, last %d lines) ----\n%s\n----" % (self.name, self.log_path, len(lines),
                                                                  "\n".join(lines))

    def cleanup(self):
        if self.proc is not None:
            try:
                self.proc.send_signal(signal.SIGCONT)  # a paused server cannot exit
            except ProcessLookupError:
                pass
        self.stop()


class _Group:
    """Context manager over a list of processes and a temporary directory of its own (unless
    given one): __exit__ stops every process by pid, also after a failed start."""

    def __init__(self, tmpdir):
        self.own_tmp = tmpdir is None
        self.tmpdir = tmpdir or harness.make_tmpdir()
        self.procs = []

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc):
        self.cleanup()
        return False

    def start(self):
        raise NotImplementedError

    def cleanup(self):
        for p in reversed(self.procs):
            p.cleanup()
        self._remove_tmp()

    def _remove_tmp(self):
        if self.own_tmp:
            if os.environ.get("ITEST_KEEP"):
                print("kept %s" % self.tmpdir)
            else:
                shutil.rmtree(self.tmpdir, ignore_errors=True)
            self.own_tmp = False

    def logs(self):
        return "\n".join(p.log_tail() for p in self.procs)


# --- redis-server ----------------------------------------------------------------------------

class RedisServer(_Process, _Group):
    """One redis-server: TCP on 127.0.0.1:<free port> (tcp=True) and/or a Unix socket
    <dir>/redis.sock (unix=True); no persistence (--save '' --appendonly no).

    password: requirepass (the default user's); acl_user: (name, password) of one more user
    with every right; replicaof: (host, port) of a primary; cluster: cluster-enabled, with a
    cluster bus on a free port of its own (port + 10000 may be taken or past 65535) and
    cluster-node-timeout cluster_node_timeout_ms; config: more "directive value" lines. The port is kept across stop()/kill()/start(), so restart() comes back where it was.
    As a context manager it starts the server and stops it (by pid) on exit."""

    def __init__(self, tmpdir=None, name="redis", tcp=True, unix=False, password=None, acl_user=None,
                 replicaof=None, config=(), port=None, cluster=False, cluster_node_timeout_ms=2000):
        _Group.__init__(self, tmpdir)
        _Process.__init__(self, self.tmpdir, name)
        self.procs = [self]
        self.port = (port or harness.free_tcp_port()) if tcp else 0
        self.unix_path = os.path.join(self.dir, "redis.sock") if unix else None
        if self.unix_path and len(self.unix_path) > harness.UNIX_PATH_MAX:
            raise HarnessError("Unix socket path too long: %s" % self.unix_path)
        self.password = password
        self.acl_user = acl_user
        self.replicaof = replicaof
        self.config = list(config)
        if cluster:
            self.config = [
                "cluster-enabled yes",
                "cluster-config-file nodes.conf",
                "cluster-node-timeout %d" % cluster_node_timeout_ms,
                "cluster-port %d" % harness.free_tcp_port(),
            ] + self.config
        self.host = "127.0.0.1"

    def write_config(self):
        lines = [
            "bind 127.0.0.1",
            "port %d" % self.port,
            "dir %s" % self.dir,
            "logfile %s" % self.log_path,
            "daemonize no",
            'save ""',
            "appendonly no",
            "protected-mode no",
            # A replica's full sync starts at once (the default waits 5 s for more replicas).
            "repl-diskless-sync-delay 0",
        ]
        if self.unix_path:
            lines += ["unixsocket %s" % self.unix_path, "unixsocketperm 700"]
        if self.password:
            lines += ["requirepass %s" % self.password, "masterauth %s" % self.password]
        if self.acl_user:
            user, pw = self.acl_user
            lines.append("user %s on >%s ~* &* +@all" % (user, pw))
        if self.replicaof:
            lines.append("replicaof %s %d" % tuple(self.replicaof))
        lines += self.config
        with open(self.conf_path, "w") as f:
            f.write("\n".join(lines) + "\n")

    @property
    def address(self):
        """"127.0.0.1:PORT" (TCP) or the Unix socket's path."""
        return "%s:%d" % (self.host, self.port) if self.port else self.unix_path

    def url(self, db=None):
        """redis://[:password@]127.0.0.1:PORT[/DB] or redis+unix://PATH for the daemon's --store."""
        auth = ":%s@" % self.password if self.password else ""
        if self.port:
            return "redis://%s%s:%d%s" % (auth, self.host, self.port, "/%d" % db if db is not None else "")
        return "redis+unix://%s" % self.unix_path

    def client(self, username=None, password=None, unix=None, **kw):
        """A blocking client (redis.Redis, bytes replies), IO_TIMEOUT per command. Logs in as
        the default user with the server's password unless given username/password."""
        kw.setdefault("socket_timeout", IO_TIMEOUT)
        kw.setdefault("socket_connect_timeout", IO_TIMEOUT)
        pw = password if password is not None else (None if username else self.password)
        if unix or (unix is None and not self.port):
            return redis.Redis(unix_socket_path=self.unix_path, username=username, password=pw, **kw)
        return redis.Redis(host=self.host, port=self.port, username=username, password=pw, **kw)

    def start(self):
        """Starts redis-server and waits (bounded) until it answers PING. Returns self."""
        self._spawn()

        def up():
            if not self.running():
                raise Fatal("redis-server %s exited with status %s\n%s" %
                                   (self.name, self.proc.returncode, self.log_tail()))
            c = self.client(socket_timeout=1.0, socket_connect_timeout=1.0)
            try:
                return c.ping()
            finally:
                c.close()

        wait_until(up, START_TIMEOUT, "PING answer from %s (%s)" % (self.name, self.address), self.log_tail)
        return self

    def restart(self):
        """stop(), then start() on the same port and socket."""
        self.stop()
        return self.start()

    def info(self, section=None):
        c = self.client()
        try:
            return c.info(section) if section else c.info()
        finally:
            c.close()

    def role(self):
        """"master" or "slave" (INFO replication's role)."""
        return self.info("replication")["role"]

    def cleanup(self):
        _Process.cleanup(self)
        self._remove_tmp()


# --- Sentinel --------------------------------------------------------------------------------

class Sentinel(_Process):
    """One redis-sentinel monitoring master_name. Sentinel rewrites its config file as it learns
    (replicas, other sentinels, the current primary), so the file is written once only: a
    restarted sentinel keeps what it knew."""

    program = "redis-sentinel"

    def __init__(self, tmpdir, name, master_name, primary, down_after_ms, failover_timeout_ms, password):
        super().__init__(tmpdir, name)
        self.port = harness.free_tcp_port()
        self.host = "127.0.0.1"
        self.master_name = master_name
        self.primary = primary
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.password = password

    def write_config(self):
        if os.path.exists(self.conf_path):
            return
        m = self.master_name
        lines = [
            "bind 127.0.0.1",
            "port %d" % self.port,
            "dir %s" % self.dir,
            "logfile %s" % self.log_path,
            "daemonize no",
            "protected-mode no",
            "sentinel monitor %s %s %d 2" % (m, self.primary[0], self.primary[1]),
            "sentinel down-after-milliseconds %s %d" % (m, self.down_after_ms),
            "sentinel failover-timeout %s %d" % (m, self.failover_timeout_ms),
            "sentinel parallel-syncs %s 1" % m,
        ]
        if self.password:
            lines.append("sentinel auth-pass %s %s" % (m, self.password))
        with open(self.conf_path, "w") as f:
            f.write("\n".join(lines) + "\n")

    @property
    def address(self):
        return "%s:%d" % (self.host, self.port)

    def client(self):
        return redis.Redis(host=self.host, port=self.port, socket_timeout=IO_TIMEOUT,
                           socket_connect_timeout=IO_TIMEOUT)

    def start(self):
        self._spawn()

        def up():
            if not self.running():
                raise Fatal("redis-sentinel %s exited with status %s\n%s" %
                            (self.name, self.proc.returncode, self.log_tail()))
            return self.ask(lambda c: c.ping())

        wait_until(up, START_TIMEOUT, "PING answer from %s (%s)" % (self.name, self.address), self.log_tail)
        return self

    def ask(self, f):
        """f(client) on a fresh connection, closed after."""
        c = self.client()
        try:
            return f(c)
        finally:
            c.close()

    def primary_address(self):
        """(host, port) this sentinel names as the primary, or None."""
        a = self.ask(lambda c: c.sentinel_get_master_addr_by_name(self.master_name))
        if not a:
            return None
        host = a[0].decode() if isinstance(a[0], bytes) else a[0]
        return (host, int(a[1]))

    def master_state(self):
        """SENTINEL MASTER's fields (flags, num-slaves, num-other-sentinels, ...)."""
        return self.ask(lambda c: c.sentinel_master(self.master_name))


class Sentinels(_Group):
    """A primary, one replica and three sentinels (quorum 2) on free loopback ports, watching
    master_name with a short down-after-milliseconds and failover-timeout, so a failover takes
    seconds. As a context manager it starts everything, waits (bounded) until the replica is
    in sync and every sentinel knows the replica and the two other sentinels, and stops every
    process (by pid) on exit.

    servers: [primary, replica] as started (RedisServer; which is the primary changes with
    failovers: current_primary()); sentinels: the three Sentinel processes."""

    def __init__(self, tmpdir=None, master_name="divvyd", down_after_ms=1000, failover_timeout_ms=3000,
                 password=None, n_sentinels=3):
        super().__init__(tmpdir)
        self.master_name = master_name
        self.password = password
        self.primary = RedisServer(self.tmpdir, "primary", password=password)
        self.replica = RedisServer(self.tmpdir, "replica", password=password,
                                   replicaof=("127.0.0.1", self.primary.port))
        self.servers = [self.primary, self.replica]
        self.sentinels = [Sentinel(self.tmpdir, "sentinel%d" % i, master_name, ("127.0.0.1", self.primary.port),
                                   down_after_ms, failover_timeout_ms, password) for i in range(n_sentinels)]
        self.procs = self.servers + self.sentinels

    def start(self):
        self.primary.start()
        self.replica.start()
        self.wait_replicated(self.primary)
        for s in self.sentinels:
            s.start()
        self.wait_sentinels_ready()
        return self

    def url(self):
        """redis+sentinel://H1:P1,H2:P2,H3:P3/NAME for the daemon's --store."""
        return "redis+sentinel://%s/%s" % (",".join(s.address for s in self.sentinels), self.master_name)

    def server_at(self, address):
        """The RedisServer listening at (host, port), or None."""
        for srv in self.servers:
            if srv.port == int(address[1]):
                return srv
        return None

    def wait_replicated(self, primary, n=1, timeout=None):
        """Waits until primary has n replicas online (INFO replication)."""
        def ok():
            info = primary.info("replication")
            return info.get("role") == "master" and info.get("connected_slaves", 0) >= n and \
                all(info.get("slave%d" % i, {}).get("state") == "online" for i in range(n))

        wait_until(ok, timeout or SYNC_TIMEOUT, "%d replica(s) in sync with %s" % (n, primary.address),
                   self.logs)

    def wait_sentinels_ready(self, timeout=None):
        """Waits until every running sentinel sees the primary up, >= 1 replica and every other
        sentinel: then a failover can be authorised."""
        n = len(self.sentinels)

        def ok():
            for s in self.sentinels:
                if not s.running():
                    continue
                st = s.master_state()
                if int(st.get("num-other-sentinels", 0)) < n - 1 or int(st.get("num-slaves", 0)) < 1:
                    return False
                if st.get("is_master_down") or st.get("is_sdown") or st.get("is_odown"):
                    return False
            return True

        wait_until(ok, timeout or SYNC_TIMEOUT, "sentinels that know each other and the replica", self.logs)

    def primary_addresses(self):
        """{sentinel name: (host, port) or None} as each running sentinel reports the primary."""
        out = {}
        for s in self.sentinels:
            if s.running():
                try:
                    out[s.name] = s.primary_address()
                except (redis.RedisError, OSError):
                    out[s.name] = None
        return out

    def primary_address(self):
        """(host, port) of the primary every running sentinel agrees on; HarnessError if they
        disagree right now."""
        answers = set(self.primary_addresses().values())
        if len(answers) != 1 or None in answers:
            raise HarnessError("sentinels disagree on the primary: %r" % self.primary_addresses())
        return answers.pop()

    def current_primary(self):
        """The RedisServer the sentinels name as the primary."""
        return self.server_at(self.primary_address())

    def wait_primary(self, not_address, timeout=None):
        """Waits until every running sentinel reports one primary other than not_address and that
        server answers as a master. Returns its (host, port)."""
        def ok():
            answers = set(self.primary_addresses().values())
            if len(answers) != 1:
                return None
            addr = answers.pop()
            if addr is None or tuple(addr) == tuple(not_address):
                return None
            srv = self.server_at(addr)
            if srv is None or not srv.running() or srv.role() != "master":
                return None
            return addr

        return wait_until(ok, timeout or FAILOVER_TIMEOUT, "new primary reported by every sentinel (old %s:%d)" %
                          tuple(not_address), self.logs)

    def failover(self, wait_old_replica=True):
        """Forces a failover (SENTINEL FAILOVER, no agreement needed) and waits until every
        sentinel reports the new primary; with wait_old_replica, also until the old primary
        replicates from the new one (so a second failover can follow). Returns the new
        (host, port)."""
        old = self.primary_address()
        s0 = self.sentinels[0]

        def ask_failover():
            # NOGOODSLAVE while the sentinel's view of the replica is not fresh yet: try again.
            return s0.ask(lambda c: c.sentinel_failover(self.master_name))

        wait_until(ask_failover, FAILOVER_TIMEOUT, "SENTINEL FAILOVER accepted", self.logs)
        new = self.wait_primary(old)
        if wait_old_replica:
            self.wait_replicated(self.server_at(new))
            self.wait_sentinels_ready()
        return new

    def provoke_failover(self, restart_old=True):
        """Kills the primary (kill -9) and waits until the sentinels agree on its replica as the
        new primary. With restart_old, the old primary is started again on its port and waited
        for as the new primary's replica. Returns the new (host, port)."""
        old = self.primary_address()
        old_srv = self.server_at(old)
        old_srv.kill()
        new = self.wait_primary(old)
        if restart_old:
            old_srv.start()
            self.wait_replicated(self.server_at(new))
            self.wait_sentinels_ready()
        return new


# --- a sentinel of the test's own ------------------------------------------------------------

def parse_command(buf):
    """One RESP array of bulk strings off buf: (argv as bytes, rest), or (None, buf) if it is
    not whole yet."""
    if not buf.startswith(b"*") or b"\r\n" not in buf:
        return None, buf
    head, rest = buf.split(b"\r\n", 1)
    argv = []
    for _ in range(int(head[1:])):
        if b"\r\n" not in rest:
            return None, buf
        ln, rest = rest.split(b"\r\n", 1)
        n = int(ln[1:])
        if len(rest) < n + 2:
            return None, buf
        argv.append(rest[:n])
        rest = rest[n + 2:]
    return argv, rest


class FakeSentinel:
    """A stand-in for redis-sentinel on 127.0.0.1:<free port>, for events a real failover gives
    no control over: it answers PING, SENTINEL get-master-addr-by-name (with `master`, a (host,
    port) the test sets; lookups counts them), SENTINEL MASTER (ip, port and `flags`) and
    (P)SUBSCRIBE, and publish() sends a message to
    every subscriber whose pattern matches, as a sentinel publishes its events. One thread per
    client; every socket has a timeout; stop() (or the `with` block's end) closes everything."""

    def __init__(self, master_name, master):
        self.master_name, self.master = master_name, tuple(master)
        self.flags = "master"  # SENTINEL MASTER's: "master,failover_in_progress" during a failover
        self.lookups = 0
        self._subs = []  # (socket, [patterns])
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self._conns = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def _accept(self):
        while not self._stop.is_set():
            try:
                c, _ = self._sock.accept()
            except OSError:
                continue
            c.settimeout(0.2)
            with self._lock:
                self._conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    @staticmethod
    def _bulk(b):
        b = b.encode() if isinstance(b, str) else b
        return b"$%d\r\n%s\r\n" % (len(b), b)

    def _serve(self, c):
        buf = b""
        while not self._stop.is_set():
            try:
                chunk = c.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while True:
                argv, buf = self._parse(buf)
                if argv is None:
                    break
                try:
                    c.sendall(self._answer(c, argv))
                except OSError:
                    return

    @staticmethod
    def _parse(buf):
        """One RESP array of bulk strings off buf, as text: (argv, rest), or (None, buf)."""
        argv, rest = parse_command(buf)
        return (None, buf) if argv is None else ([a.decode() for a in argv], rest)

    def _answer(self, c, argv):
        cmd = argv[0].upper()
        if cmd == "PING":
            return b"+PONG\r\n"
        if cmd == "SENTINEL" and len(argv) == 3 and argv[1].lower() == "get-master-addr-by-name":
            with self._lock:
                self.lookups += 1
                master = self.master
            if argv[2] != self.master_name or master is None:
                return b"*-1\r\n"
            return b"*2\r\n" + self._bulk(master[0]) + self._bulk(str(master[1]))
        if cmd == "SENTINEL" and len(argv) == 3 and argv[1].lower() == "master":
            with self._lock:
                master, flags = self.master, self.flags
            if argv[2] != self.master_name or master is None:
                return b"-ERR No such master with that name\r\n"
            fields = ["name", self.master_name, "ip", master[0], "port", str(master[1]), "flags", flags]
            return b"*%d\r\n" % len(fields) + b"".join(self._bulk(f) for f in fields)
        if cmd in ("SUBSCRIBE", "PSUBSCRIBE"):
            out = b""
            with self._lock:
                entry = next((e for e in self._subs if e[0] is c), None)
                if entry is None:
                    entry = (c, [])
                    self._subs.append(entry)
                for pattern in argv[1:]:
                    entry[1].append(pattern)
                    out += b"*3\r\n" + self._bulk(cmd.lower()) + self._bulk(pattern) + b":%d\r\n" % len(entry[1])
            return out
        return b"-ERR unknown command '%s'\r\n" % argv[0].encode()

    def subscribers(self, patterns=1):
        """How many clients are subscribed to at least `patterns` patterns."""
        with self._lock:
            return sum(1 for _, p in self._subs if len(p) >= patterns)

    def publish(self, channel, payload):
        """Sends (channel, payload) to every subscriber with a matching pattern. Returns how many."""
        n = 0
        with self._lock:
            for c, patterns in self._subs:
                for p in patterns:
                    if fnmatch.fnmatchcase(channel, p):
                        try:
                            c.sendall(b"*4\r\n" + self._bulk("pmessage") + self._bulk(p) + self._bulk(channel) +
                                      self._bulk(payload))
                            n += 1
                        except OSError:
                            pass
                        break
        return n

    def stop(self):
        self._stop.set()
        self._thread.join(2)
        with self._lock:
            for c in self._conns:
                try:
                    c.close()
                except OSError:
                    pass
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


# --- counting through a failover ---------------------------------------------------------------

FAILOVER_EVENTS = ("+try-failover", "+promoted-slave", "+switch-master", "-failover-abort-*")


class SentinelEvents:
    """Threads subscribed to patterns (default FAILOVER_EVENTS) on every sentinel of a Sentinels,
    recording (time.monotonic(), sentinel name, channel, payload) as each message is read. Bounded:
    each thread polls with a 0.1 s timeout and ends on stop() or after max_seconds."""

    def __init__(self, sentinels, patterns=FAILOVER_EVENTS, max_seconds=120.0):
        self.events = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = []
        self._clients = []
        for s in sentinels.sentinels:
            c = s.client()
            p = c.pubsub(ignore_subscribe_messages=True)
            p.psubscribe(*patterns)
            p.get_message(timeout=1.0)  # the confirmations are read before anything happens
            self._clients.append((c, p))
            t = threading.Thread(target=self._run, args=(s.name, p, time.monotonic() + max_seconds), daemon=True)
            self._threads.append(t)
        for t in self._threads:
            t.start()

    def _run(self, name, p, deadline):
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                m = p.get_message(timeout=0.1)
            except (redis.RedisError, OSError):
                return
            if m and m.get("type") in ("message", "pmessage"):
                at = time.monotonic()
                ch, data = m["channel"], m["data"]
                with self._lock:
                    self.events.append((at, name, ch.decode() if isinstance(ch, bytes) else ch,
                                        data.decode() if isinstance(data, bytes) else data))

    def first(self, channel):
        """The time the first `channel` message was read (None: none yet)."""
        with self._lock:
            times = [e[0] for e in self.events if e[2] == channel]
        return min(times) if times else None

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join(5.0)
        for c, p in self._clients:
            try:
                p.close()
                c.close()
            except (redis.RedisError, OSError):
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


class HitLoad:
    """A client thread sending `line` to a daemon one request at a time, at most `rate` per second,
    until stop() (or max_seconds): every reply is recorded as (time.monotonic() of the reply,
    reply). For a rule whose limit is never reached and whose onBackendError is deny, an allowed
    reply is a decrement acknowledged by Redis (its credit is the counter's value after it) and a
    denied one is the policy's answer, not a write."""

    def __init__(self, daemon, line, rate=100, max_seconds=60.0):
        self.daemon, self.line, self.period = daemon, line, 1.0 / rate
        self.replies = []
        self.error = None
        self._stop = threading.Event()
        self._deadline = time.monotonic() + max_seconds
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        try:
            with self.daemon.connect() as c:
                next_at = time.monotonic()
                while not self._stop.is_set() and time.monotonic() < self._deadline:
                    reply = c.request(self.line)
                    self.replies.append((time.monotonic(), reply))
                    next_at += self.period
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        self._stop.wait(delay)
        except (OSError, HarnessError) as e:
            self.error = e

    def count(self):
        return len(self.replies)

    def stop(self):
        """Stops the thread (bounded wait); returns the replies."""
        self._stop.set()
        self._thread.join(harness.IO_TIMEOUT + 1)
        return self.replies

    def acknowledged(self):
        """[(time, credit)] of the allowed replies: decrements Redis acknowledged."""
        out = []
        for at, reply in self.replies:
            got = harness.parse_ok(reply)
            if got and got[0]:
                out.append((at, got[1]))
        return out

    def by_policy(self):
        """How many replies were the policy's (denied, on a limit never reached)."""
        return sum(1 for _, reply in self.replies if (harness.parse_ok(reply) or (True,))[0] is False)


def count_decrements(credits, limit, value):
    """What a counter of `limit` (a divvy fixed window: the first hit sets limit-1, each next one
    decrements) lost and granted twice, from the credits of every acknowledged decrement (of any
    number of daemons) and its value afterwards. Returns (acknowledged, recorded, lost, doubled):
    recorded = limit - value decrements are in the counter; lost = acknowledged - recorded;
    doubled = credits granted more than once (a lost decrement's credit is granted again)."""
    recorded = limit - int(value)
    return len(credits), recorded, len(credits) - recorded, len(credits) - len(set(credits))


# --- Redis Cluster ---------------------------------------------------------------------------

class Cluster(_Group):
    """A Redis Cluster of n primaries (no replicas) on free loopback ports, each with its own
    free cluster-bus port, created with redis-cli --cluster create. As a context manager it
    starts the nodes, creates the cluster, waits (bounded) for cluster_state:ok with every node
    agreeing on the slots, and stops every process (by pid) on exit.

    nodes: the RedisServer of each primary (node_id() on each gives its cluster id)."""

    def __init__(self, tmpdir=None, n=3, node_timeout_ms=2000, password=None):
        super().__init__(tmpdir)
        self.password = password
        self.nodes = []
        for i in range(n):
            self.nodes.append(RedisServer(self.tmpdir, "node%d" % i, password=password, cluster=True,
                                          cluster_node_timeout_ms=node_timeout_ms))
        self.procs = list(self.nodes)
        self._ids = {}

    def start(self):
        for node in self.nodes:
            node.start()
        cmd = ["redis-cli", "--cluster", "create"] + [n.address for n in self.nodes] + \
            ["--cluster-replicas", "0", "--cluster-yes"]
        if self.password:
            cmd += ["-a", self.password, "--no-auth-warning"]
        try:
            p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=CLUSTER_TIMEOUT)
        except subprocess.TimeoutExpired as e:
            raise HarnessError("redis-cli --cluster create did not finish within %.0fs: %s\n%s" %
                               (CLUSTER_TIMEOUT, e.stdout, self.logs()))
        if p.returncode != 0:
            raise HarnessError("redis-cli --cluster create failed (%d):\n%s%s\n%s" %
                               (p.returncode, p.stdout, p.stderr, self.logs()))
        self.wait_ok()
        return self

    def url(self):
        """redis+cluster://H1:P1,H2:P2,... for the daemon's --store."""
        return "redis+cluster://" + ",".join(n.address for n in self.nodes)

    def _ask(self, node, *args):
        c = node.client()
        try:
            return c.execute_command(*args)
        finally:
            c.close()

    def node_id(self, node):
        """The node's cluster id (CLUSTER MYID), as str."""
        if node.name not in self._ids:
            self._ids[node.name] = self._ask(node, "CLUSTER MYID").decode()
        return self._ids[node.name]

    def node_at(self, port):
        for n in self.nodes:
            if n.port == int(port):
                return n
        return None

    def slots(self, node=None):
        """{slot range (start, end): port of its primary} as node (default: the first) sees it."""
        out = {}
        for entry in self._ask(node or self.nodes[0], "CLUSTER SLOTS"):
            out[(int(entry[0]), int(entry[1]))] = int(entry[2][1])
        return out

    def owner(self, slot, node=None):
        """The RedisServer serving slot as node (default: the first) sees it, or None."""
        for (start, end), port in self.slots(node).items():
            if start <= slot <= end:
                return self.node_at(port)
        return None

    def node_for_key(self, key, node=None):
        return self.owner(key_slot(key), node)

    def client_for_key(self, key):
        """A client of the primary serving key (it still answers ASK while the slot migrates)."""
        return self.node_for_key(key).client()

    def wait_ok(self, timeout=None):
        """Waits until every running node says cluster_state:ok and they all report the same
        slots, covering all 16384."""
        def ok():
            views = []
            for n in self.nodes:
                if not n.running():
                    continue
                if self._ask(n, "CLUSTER INFO").get("cluster_state") != "ok":
                    return False
                views.append(self.slots(n))
            if any(v != views[0] for v in views):
                return False
            return sum(e - s + 1 for s, e in views[0]) == CLUSTER_SLOTS

        wait_until(ok, timeout or CLUSTER_TIMEOUT, "cluster_state:ok with every node agreeing on the slots",
                   self.logs)

    def wait_owner(self, slot, node, timeout=None):
        """Waits until every running node names node as slot's owner."""
        wait_until(lambda: all(self.owner(slot, n) is node for n in self.nodes if n.running()),
                   timeout or CLUSTER_TIMEOUT, "every node naming %s as owner of slot %d" % (node.address, slot),
                   self.logs)

    # The standard live resharding, step by step (the steps redis-cli --cluster reshard takes).

    def begin_migration(self, slot, to_node):
        """CLUSTER SETSLOT IMPORTING on to_node, then MIGRATING on the owner. Returns the owner
        (the source). From now on the source answers ASK for keys of slot it no longer has."""
        src = self.owner(slot)
        if src is None or src is to_node:
            raise HarnessError("slot %d: owner %s, cannot migrate to %s" %
                               (slot, src and src.address, to_node.address))
        self._ask(to_node, "CLUSTER SETSLOT", slot, "IMPORTING", self.node_id(src))
        self._ask(src, "CLUSTER SETSLOT", slot, "MIGRATING", self.node_id(to_node))
        return src

    def move_keys(self, slot, src, dst, batch=10, max_keys=None):
        """MIGRATEs the keys of slot from src to dst, batch keys per MIGRATE (CLUSTER
        GETKEYSINSLOT), at most max_keys (None: all). Returns how many were moved."""
        moved = 0
        total = self._ask(src, "CLUSTER COUNTKEYSINSLOT", slot)
        deadline = time.monotonic() + CLUSTER_TIMEOUT
        for _ in range(total // max(batch, 1) + 2):  # bounded: each round moves a batch
            want = batch if max_keys is None else min(batch, max_keys - moved)
            if want <= 0:
                break
            keys = self._ask(src, "CLUSTER GETKEYSINSLOT", slot, want)
            if not keys:
                break
            args = ["MIGRATE", dst.host, dst.port, "", 0, int(IO_TIMEOUT * 1000)]
            if self.password:
                args += ["AUTH", self.password]
            self._ask(src, *(args + ["KEYS"] + keys))
            moved += len(keys)
            if time.monotonic() > deadline:
                raise HarnessError("slot %d: keys still moving after %.0fs" % (slot, CLUSTER_TIMEOUT))
        return moved

    def finish_migration(self, slot, src, dst):
        """CLUSTER SETSLOT NODE on the destination, then the source, then every other node; waits
        until every node names dst as the owner."""
        dst_id = self.node_id(dst)
        for n in [dst, src] + [n for n in self.nodes if n is not dst and n is not src and n.running()]:
            self._ask(n, "CLUSTER SETSLOT", slot, "NODE", dst_id)
        self.wait_owner(slot, dst)

    def migrate_slot(self, slot, to_node, batch=10, during=None):
        """Moves slot to to_node live: begin_migration(), move_keys(), finish_migration().
        during(src, dst), if given, is called while the slot is migrating with the first batch
        of keys already on to_node (a hit on those gets ASK, on the others the source answers).
        Returns how many keys were moved."""
        src = self.begin_migration(slot, to_node)
        moved = 0
        if during is not None:
            moved += self.move_keys(slot, src, to_node, batch, max_keys=batch)
            during(src, to_node)
        moved += self.move_keys(slot, src, to_node, batch)
        self.finish_migration(slot, src, to_node)
        return moved
