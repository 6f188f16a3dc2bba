#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""RESP on divvyd's sockets (issue #17): a connection whose first byte is '*' speaks the Redis
protocol, any other the divvy line protocol, on every listener. Driven with redis-cli (argv,
stdin and --pipe), Debian's python3-redis (execute_command, pipelines, a ConnectionPool with
health checks) and hiredis from C (tests/integration/hiredis-client), against
tests/data/verbs.ini; redis-cell's worked example with --allow-client-limits; malformed RESP
bounded like a bad line (one error, that connection closed, nothing else affected).

- RESP's limits exactly at and one past each bound over a socket (a 10,368-byte request,
  8,192-byte bulk, 136 arguments, 64 distinct keys), and maximal requests pipelined so that
  the input buffer holds a framed request and a partial one across compactions; a RESP
  connection that turns to the line protocol after its first request.

Run one test:  tests/integration/test_resp.py Resp.test_redis_cli
"""

import itertools
import os
import random
import shutil
import socket
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultlib  # noqa: E402
import harness  # noqa: E402
from harness import data_path  # noqa: E402
import redisfix  # noqa: E402  (finds Debian's python3-redis under a pyenv python3 too)

redis = redisfix.redis
_ids = itertools.count(1)


def uid(prefix):
    return "%s-%d-%d" % (prefix, os.getpid(), next(_ids))


NULL2 = "$-1"  # RESP2's null, told apart from RESP3's "_" (None)


def resp_read(conn):
    """One reply, RESP2 or RESP3, from a harness.Conn: str (simple), ("ERR", text), int, bytes
    (bulk), None ("_"), NULL2 ("$-1" or "*-1"), list ("*"), dict ("%"), bool ("#")."""
    def line():
        while b"\r\n" not in conn.buf:
            if not conn._fill():
                raise EOFError("closed: %r" % conn.buf)
        out, conn.buf = conn.buf.split(b"\r\n", 1)
        return out.decode()

    head = line()
    kind, rest = head[0], head[1:]
    if kind == "+":
        return rest
    if kind == "-":
        return ("ERR", rest)
    if kind == ":":
        return int(rest)
    if kind == "_":
        return None
    if kind == "#":
        return rest == "t"
    if kind == "$":
        n = int(rest)
        if n < 0:
            return NULL2
        while len(conn.buf) < n + 2:
            if not conn._fill():
                raise EOFError("closed in a bulk")
        out, conn.buf = conn.buf[:n], conn.buf[n + 2:]
        return out
    if kind == "*":
        n = int(rest)
        return NULL2 if n < 0 else [resp_read(conn) for _ in range(n)]
    if kind == "%":
        return dict((resp_read(conn), resp_read(conn)) for _ in range(int(rest)))
    raise AssertionError("unexpected reply %r" % head)


def resp_session(d, *commands):
    """The replies to commands (tuples of arguments) sent pipelined on one fresh connection."""
    with d.connect("tcp") as c:
        c.send(b"".join(harness.resp_command(*cmd) for cmd in commands))
        return [resp_read(c) for _ in commands]


class RespDaemonMixin:
    def cli(self, *args, port=None, stdin=None, extra=()):
        """redis-cli's output (raw: one line per element) for one command."""
        cmd = [self.redis_cli, "-p", str(port or self.d.port)] + list(extra) + list(args)
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=harness.IO_TIMEOUT)
        self.assertEqual(p.returncode, 0, "%s: %s %s" % (cmd, p.stdout, p.stderr))
        return p.stdout.replace("\n\n", "\n")  # redis-cli follows an error with an empty line

    def raw(self, data, kind="tcp", d=None):
        """Sends data on a fresh connection, shuts down writing, returns all the daemon says."""
        with (d or self.d).connect(kind) as c:
            c.send(data)
            c.shutdown_write()
            return harness.read_until_close(c.sock)


class Resp(RespDaemonMixin, harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        cls.redis_cli = shutil.which("redis-cli")
        tmp = harness.make_tmpdir()
        # Registered first, so it runs last: after the daemon's own cleanup, which leaves a
        # directory it was given (its database holds a 64 MiB journal segment).
        cls.addClassCleanup(shutil.rmtree, tmp, True)
        cls.admin_path = os.path.join(tmp, "admin.sock")
        cls.d = cls.start_shared_daemon(data_path("verbs.ini"), tmpdir=tmp,
                                        args=["--listen", "admin:unix:" + cls.admin_path,
                                              "--allow-client-limits"])

    def setUp(self):
        super().setUp()
        if not self.redis_cli:
            self.skipTest("redis-cli not found (apt-get install redis-tools)")

    # --- redis-cli -----------------------------------------------------------------------------

    def test_redis_cli(self):
        u = uid("cli")
        self.assertEqual(self.cli("PING"), "PONG\n")
        self.assertEqual(self.cli("PING", "hello there"), "hello there\n")
        self.assertEqual(self.cli("ECHO", "a b"), "a b\n")
        # HIT -> [allowed, credit, reset]; the first hit of a fixed window resets in its length.
        self.assertEqual(self.cli("HIT", "path", "/fw", "user", u), "1\n9\n3600\n")
        # TAKE/PEEK -> [allowed, credit, limit, reset, retry, rule]
        out = self.cli("TAKE", "3", "path", "/fw", "user", u).split("\n")
        self.assertEqual(out[:3] + out[5:6], ["1", "6", "10", "fw"])
        self.assertEqual(out[4], "0")
        out = self.cli("PEEK", "7", "path", "/fw", "user", u).split("\n")
        self.assertEqual([out[0], out[1], out[5]], ["0", "6", "fw"])
        self.assertGreaterEqual(int(out[4]), 1)
        # The same counter on the line protocol, on the same port.
        self.assertHit(self.d.request("HIT path=/fw user=%s" % u), True, 5, (3590, 3600))
        self.assertIn('actor="%s"' % u, self.cli("EXPLAIN", "path", "/fw", "user", u))
        # Errors name the problem; the connection stays usable (redis-cli prints "(error)" on a tty).
        self.assertEqual(self.cli("FROB", "x"), "ERR unknown command 'FROB'\n")
        self.assertEqual(self.cli("TAKE", "0", "path", "/fw"), "ERR bad-count count must be at least 1\n")
        self.assertIn("NOPROTO", self.cli("HELLO", "4"))
        self.assertIn("divvyd", self.cli("HELLO", "2"))
        self.assertEqual(self.cli("SELECT", "0"), "OK\n")
        self.assertIn("out of range", self.cli("SELECT", "1"))
        self.assertEqual(self.cli("RESET", "path", "/fw", "user", u), "ERR forbidden RESET needs an admin listener\n")

    def test_resp3_session(self):
        # What redis-py 8 sends on connecting with its defaults, then a HIT; HELLO 2 goes back.
        u = uid("resp3")
        got = resp_session(self.d,
                           ("HELLO", "3", "AUTH", "default", "x", "SETNAME", "me"),
                           ("CLIENT", "SETINFO", "LIB-NAME", "redis-py"),
                           ("CLIENT", "SETINFO", "LIB-VER", "8.0.0"),
                           ("CLIENT", "MAINT_NOTIFICATIONS", "on", "moving-endpoint-type", "internal-ip"),
                           ("HIT", "path", "/fw", "user", u),
                           ("CLIENT", "GETNAME"),
                           ("COMMAND", "INFO", "get"),
                           ("HELLO", "4"),
                           ("HELLO", "2"),
                           ("COMMAND", "INFO", "get"),
                           ("AUTH", "pw"))
        hello = got[0]
        self.assertIsInstance(hello, dict)
        self.assertEqual(set(hello), {b"server", b"version", b"proto", b"id", b"mode", b"role", b"modules"})
        self.assertEqual((hello[b"server"], hello[b"proto"], hello[b"mode"], hello[b"role"], hello[b"modules"]),
                         (b"divvyd", 3, b"standalone", b"master", []))
        self.assertEqual(got[1:5], ["OK", "OK", "OK", {b"allowed": True, b"credit": 9, b"reset": 3600}])
        self.assertEqual(got[5:7], [b"me", [None]])
        self.assertEqual(got[7], ("ERR", "NOPROTO sorry, this protocol version is not supported"))
        self.assertEqual(got[8][got[8].index(b"proto") + 1], 2)  # a flat array again
        self.assertEqual(got[9], [NULL2])
        self.assertEqual(got[10], ("ERR", "ERR AUTH <password> called without any password configured for "
                                          "the default user. Are you sure your configuration is correct?"))

    def test_resp3_replies(self):
        # Each reply's RESP3 shape (docs/clients.md): divvyd's verbs answer maps named as on a
        # line, "allowed" a boolean; the peers' commands answer as the peers do on RESP3 (arrays,
        # integers); the same session after HELLO 2 answers RESP2's arrays again.
        u, key, gkey, rkey = uid("r3"), uid("cell"), uid("gcra"), uid("rl")
        session = [("HIT", "path", "/fw", "user", u),
                   ("TAKE", "2", "path", "/fw", "user", u),
                   ("PEEK", "20", "path", "/fw", "user", u),
                   ("EXPLAIN", "path", "/fw", "user", u),
                   ("MULTI",), ("HIT", "path", "/fw", "user", u), ("EXEC",),
                   ("CL.THROTTLE", key, "15", "30", "60"),
                   ("GCRA", gkey, "15", "30", "60"),
                   ("RL.REDUCE", rkey, "3", "60"),
                   ("DEL", key)]
        got = resp_session(self.d, ("HELLO", "3"), *session)[1:]
        self.assertEqual(got[0], {b"allowed": True, b"credit": 9, b"reset": 3600})
        self.assertEqual(got[1], {b"allowed": True, b"credit": 7, b"limit": 10, b"reset": 3600, b"retry": 0,
                                  b"rule": b"fw"})
        self.assertEqual(got[2], {b"allowed": False, b"credit": 7, b"limit": 10, b"reset": 3600, b"retry": -1,
                                  b"rule": b"fw"})
        self.assertEqual(got[3], {b"rule": b"fw", b"index": 2, b"policy": b"stop", b"actor": u.encode(),
                                  b"algorithm": b"fixed-window", b"canaries": [], b"continue": []})
        self.assertEqual(got[4:7], ["OK", "QUEUED", [{b"allowed": True, b"credit": 6, b"reset": 3600}]])
        self.assertEqual(got[7], [0, 16, 15, -1, 2])  # redis-cell's array
        self.assertEqual(got[8], [0, 16, 15, -1, 2])  # Redis 8's GCRA: an array too
        self.assertEqual(got[9:], [3, 1])
        # RESP2 after HELLO 2, on the same counters (the cell was deleted: fresh again)
        got = resp_session(self.d, ("HELLO", "2"), *session)[1:]
        self.assertEqual(got[:3], [[1, 5, 3600], [1, 3, 10, 3600, 0, b"fw"], [0, 3, 10, 3600, -1, b"fw"]])
        self.assertEqual(got[3], ("rule=fw index=2 policy=stop actor=\"%s\" algorithm=fixed-window canaries=- "
                                  "continue=-" % u).encode())
        self.assertEqual(got[4:7], ["OK", "QUEUED", [[1, 2, 3600]]])
        self.assertEqual(got[7], [0, 16, 15, -1, 2])
        self.assertEqual(got[8][:3], [0, 16, 14])
        self.assertEqual(got[9:], [2, 1])

    def test_info(self):
        # ioredis's ready check: INFO, then "loading:0"; redis-py parses the whole text.
        got = resp_session(self.d, ("INFO",), ("INFO", "persistence"))
        self.assertIn(b"\r\nloading:0\r\n", got[0])
        self.assertTrue(got[0].startswith(b"# Server\r\nredis_version:"), got[0])
        self.assertTrue(got[1].startswith(b"# Persistence\r\nloading:0\r\n"), got[1])
        if redis is None:
            return
        r = redis.Redis(host="127.0.0.1", port=self.d.port, socket_timeout=harness.IO_TIMEOUT)
        info = r.info()
        self.assertEqual(info["loading"], 0)
        self.assertGreaterEqual(info["connected_clients"], 1)
        self.assertEqual(info["redis_mode"], "standalone")
        # Redis's own text, which redis-py from 5.0 on raises as AuthenticationError (4.3: ResponseError)
        with self.assertRaises(redis.ResponseError) as e:
            r.execute_command("AUTH", "pw")
        self.assertEqual(str(e.exception), "AUTH <password> called without any password configured for the "
                         "default user. Are you sure your configuration is correct?")
        r.close()

    def test_transactions(self):
        u = uid("multi")
        hit = ("HIT", "path", "/fw", "user", u)
        # An error while queueing: EXEC runs nothing, nothing is charged.
        got = resp_session(self.d, ("MULTI",), hit, ("NOSUCH",), hit, ("EXEC",), hit)
        self.assertEqual(got[:5], ["OK", "QUEUED", ("ERR", "ERR unknown command 'NOSUCH'"), "QUEUED",
                                   ("ERR", "EXECABORT Transaction discarded because of previous errors.")])
        self.assertEqual(got[5], [1, 9, 3600])  # the first hit of u
        # Executed: the replies in order, in one array.
        got = resp_session(self.d, ("MULTI",), hit, ("PING",), hit, ("EXEC",))
        self.assertEqual(got, ["OK", "QUEUED", "QUEUED", "QUEUED", [[1, 8, 3600], "PONG", [1, 7, 3600]]])
        got = resp_session(self.d, ("MULTI",), hit, ("DISCARD",), ("EXEC",), hit)
        self.assertEqual(got, ["OK", "QUEUED", "OK", ("ERR", "ERR EXEC without MULTI"), [1, 6, 3600]])
        if redis is None:
            return
        # redis-py's default pipeline is a transaction.
        r = redis.Redis(host="127.0.0.1", port=self.d.port, socket_timeout=harness.IO_TIMEOUT)
        p = r.pipeline()
        p.execute_command(*hit)
        p.execute_command(*hit)
        self.assertEqual(p.execute(), [[1, 5, 3600], [1, 4, 3600]])
        p = r.pipeline()
        p.execute_command(*hit)
        p.execute_command("NOSUCH")
        with self.assertRaises(redis.ResponseError):
            p.execute()
        self.assertEqual(r.execute_command(*hit), [1, 3, 3600])  # the failed pipeline charged nothing
        r.close()

    def test_admin_listener(self):
        # RESET and REFUND over RESP: admin listeners only, as on the line protocol.
        u = uid("admin")
        self.assertEqual(self.cli("HIT", "path", "/fw", "user", u), "1\n9\n3600\n")
        self.assertEqual(self.cli("RESET", "path", "/fw", "user", u, extra=["-s", self.admin_path]), "1\n")
        self.assertEqual(self.cli("HIT", "path", "/fw", "user", u), "1\n9\n3600\n")

    def test_redis_cli_stdin_and_pipe(self):
        u = uid("pipe")
        # Commands on stdin, one per line: answered in order on one connection.
        out = self.cli(stdin="PING\nHIT path /fw user %s\nHIT path /fw user %s\n" % (u, u))
        self.assertEqual(out.split("\n")[:7], ["PONG", "1", "9", "3600", "1", "8", "3600"])
        # --pipe: raw RESP, pipelined; redis-cli ends with an ECHO of its own to know it is done.
        data = b"".join(harness.resp_command("HIT", "path", "/fw", "user", u) for _ in range(20))
        p = subprocess.run([self.redis_cli, "-p", str(self.d.port), "--pipe"], input=data,
                           capture_output=True, timeout=harness.IO_TIMEOUT)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn(b"errors: 0, replies: 20", p.stdout)
        self.assertEqual(self.cli("PEEK", "0", "path", "/fw", "user", u).split("\n")[:2], ["1", "0"])

    # --- redis-py --------------------------------------------------------------------------------

    def test_python_redis(self):
        if redis is None:
            self.skipTest("python3-redis not found")
        u = uid("py")
        r = redis.Redis(host="127.0.0.1", port=self.d.port, socket_timeout=harness.IO_TIMEOUT,
                        client_name="divvy-test")
        self.assertTrue(r.ping())
        self.assertEqual(r.echo("x y"), b"x y")
        self.assertEqual(r.client_getname(), "divvy-test")
        self.assertEqual(r.execute_command("HIT", "path", "/fw", "user", u), [1, 9, 3600])
        self.assertEqual(r.execute_command("TAKE", 2, "path", "/fw", "user", u)[:3], [1, 7, 10])
        with self.assertRaises(redis.ResponseError) as e:
            r.execute_command("TAKE", 0, "path", "/fw", "user", u)
        self.assertIn("bad-count", str(e.exception))
        self.assertTrue(r.ping())  # an error does not close the connection
        # A pipeline: one write, the replies in order.
        p = r.pipeline(transaction=False)
        for _ in range(10):
            p.execute_command("HIT", "path", "/fw", "user", u)
        got = p.execute()
        self.assertEqual([g[:2] for g in got], [[1, 6], [1, 5], [1, 4], [1, 3], [1, 2], [1, 1], [1, 0],
                                                 [0, 0], [0, 0], [0, 0]])
        r.close()

    def test_python_pool_health_checks(self):
        if redis is None:
            self.skipTest("python3-redis not found")
        u = uid("pool")
        # health_check_interval: the pool PINGs a connection before using it once that long has
        # passed; a tiny interval makes every command after the first do so.
        pool = redis.ConnectionPool(host="127.0.0.1", port=self.d.port, health_check_interval=1e-6,
                                    socket_timeout=harness.IO_TIMEOUT, max_connections=4)
        r = redis.Redis(connection_pool=pool)
        for i in range(12):
            self.assertEqual(r.execute_command("HIT", "path", "/sw", "user", u)[:2], [1, 9 - i] if i < 10 else [0, 0])
        self.assertTrue(r.ping())
        pool.disconnect()

    # --- hiredis ---------------------------------------------------------------------------------

    def test_hiredis(self):
        prog = os.path.join(harness.top_builddir(), "tests", "integration", "hiredis-client")
        if not os.access(prog, os.X_OK):
            self.skipTest("%s not built (make check builds it)" % prog)
        u = uid("hiredis")
        p = subprocess.run([prog, str(self.d.port), "PING", "HIT path /fw user " + u,
                            "PEEK path /fw user " + u, "NOPE", "CL.THROTTLE %s 15 30 60" % u,
                            "CLIENT SETNAME h", "CLIENT GETNAME"],
                           capture_output=True, text=True, timeout=harness.IO_TIMEOUT)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout.splitlines(), [
            "s:PONG", "[i:1, i:9, i:3600]", "[i:1, i:8, i:10, i:3600, i:0, b:fw]",
            "e:ERR unknown command 'NOPE'", "[i:0, i:16, i:15, i:-1, i:2]", "s:OK", "b:h"])

    # --- redis-cell and Smyte ------------------------------------------------------------------

    def test_cl_throttle_worked_example(self):
        # redis-cell's README: on a fresh key, 15 burst, 30 per 60 s -> not limited, limit 16,
        # 15 remaining, no retry, full again in 2 s.
        key = uid("user123")
        self.assertEqual(self.cli("CL.THROTTLE", key, "15", "30", "60"), "0\n16\n15\n-1\n2\n")
        self.assertEqual(self.cli("CL.THROTTLE", key, "15", "30", "60", "0").split("\n")[:3], ["0", "16", "15"])
        self.assertIn("Zero rates", self.cli("CL.THROTTLE", key, "15", "0", "60"))
        # DEL deletes a GCRA counter too, as Redis's DEL deletes the key GCRA wrote.
        g = uid("gcra")
        self.assertEqual(self.cli("GCRA", g, "0", "1", "60"), "0\n1\n0\n-1\n60\n")
        self.assertEqual(self.cli("GCRA", g, "0", "1", "60").split("\n")[:2], ["1", "1"])
        self.assertEqual(self.cli("DEL", g), "1\n")
        self.assertEqual(self.cli("DEL", g), "0\n")
        self.assertEqual(self.cli("GCRA", g, "0", "1", "60"), "0\n1\n0\n-1\n60\n")
        # Smyte: the tokens before the take; a take larger than what is left drains the bucket.
        k = uid("rl")
        self.assertEqual(self.cli("RL.REDUCE", k, "3", "60"), "3\n")
        self.assertEqual(self.cli("RL.REDUCE", k, "3", "60", "TAKE", "5"), "2\n")
        self.assertEqual(self.cli("RL.GET", k, "3", "60"), "0\n")
        self.assertEqual(self.cli("RL.PGET", k, "3", "60000"), "0\n")

    # --- bounds ----------------------------------------------------------------------------------

    def test_malformed_bounded(self):
        u = uid("bad")
        with self.d.connect("tcp") as good:
            good.send(harness.resp_command("PING"))
            self.assertEqual(good.sock.recv(64), b"+PONG\r\n")
            cases = [
                (b"*1\r\n$999999999\r\n", b"-ERR Protocol error: bulk string longer than the line limit\r\n"),
                (b"*1\r\n*1\r\n$1\r\na\r\n", b"-ERR Protocol error: nested arrays are not supported\r\n"),
                (b"*2\r\n$4\r\nPING\r\n:1\r\n", b"-ERR Protocol error: expected '$' (a bulk string)\r\n"),
                (b"*1\r\n$4\r\nPINGxx\r\n", b"-ERR Protocol error: expected CRLF after a bulk string\r\n"),
                (b"*99999\r\n", b"-ERR Protocol error: too many arguments\r\n"),
                (harness.resp_command("HIT", "x" * 9000), b"-ERR Protocol error: bulk string longer than the line limit\r\n"),
                # a valid request first: answered, then the error, then nothing
                (harness.resp_command("HIT", "path", "/fw", "user", u) + b"*1\r\n*0\r\n" + harness.resp_command("PING"),
                 b"*3\r\n:1\r\n:9\r\n:3600\r\n-ERR Protocol error: nested arrays are not supported\r\n"),
            ]
            for data, want in cases:
                self.assertEqual(self.raw(data), want, data[:40])
            # A huge bulk announced without its bytes: refused at once, not buffered.
            with self.d.connect("tcp") as c:
                c.send(b"*1\r\n$1000000000\r\n" + b"x" * 1000)
                self.assertEqual(harness.read_until_close(c.sock), b"-ERR Protocol error: bulk string longer than the line limit\r\n")
            # The other connection did not notice.
            good.send(harness.resp_command("HIT", "path", "/fw", "user", u))
            self.assertEqual(good.sock.recv(64), b"*3\r\n:1\r\n:8\r\n:3600\r\n")

    def test_garbage_after_star(self):
        # Random bytes after a first '*': one RESP error line each, then closed.
        rng = random.Random(17)
        for i in range(16):
            payload = b"*" + bytes(rng.getrandbits(8) for _ in range(16 * 1024))
            got = self.raw(payload, kind="unix" if i % 2 else "tcp")
            self.assertTrue(got.startswith(b"-ERR Protocol error: ") and got.endswith(b"\r\n"), got[:80])
            self.assertEqual(got.count(b"\r\n"), 1, got[:200])
        self.assertEqual(self.cli("PING"), "PONG\n")

    def test_line_and_resp_on_one_listener(self):
        # A divvy client and a Redis client, interleaved on one listener, each on its own
        # protocol, the same counter; a divvy line never turns RESP after its first byte.
        u = uid("mix")
        for kind in ("tcp", "unix"):
            with self.d.connect(kind) as line, self.d.connect(kind) as rc:
                self.assertHit(line.request("HIT path=/fw user=%s-%s" % (u, kind)), True, 9, 3600)
                rc.send(harness.resp_command("HIT", "path", "/fw", "user", "%s-%s" % (u, kind)))
                self.assertEqual(rc.sock.recv(64), b"*3\r\n:1\r\n:8\r\n:3600\r\n")
                self.assertHit(line.request("HIT path=/fw user=%s-%s" % (u, kind)), True, 7, (3590, 3600))
        self.assertEqual(self.raw(b"HIT path=/fw user=%s\n*1\r\n" % u.encode()),
                         b'OK true 9 3600\nERR unknown-command "unknown command"\n')


class RespOff(RespDaemonMixin, harness.DaemonTestCase):
    def test_resp_off(self):
        # --resp=off: "*..." is an unknown command line, as before issue #17; CL.THROTTLE
        # without --allow-client-limits is refused naming the flag.
        d = self.start_daemon(data_path("verbs.ini"), args=["--resp=off"])
        self.assertEqual(self.raw(harness.resp_command("PING"), d=d), b'ERR unknown-command "unknown command"\n')
        self.assertHit(d.request("HIT path=/fw user=off"), True, 9, 3600)
        d2 = self.start_daemon(data_path("verbs.ini"))
        self.assertEqual(self.raw(harness.resp_command("CL.THROTTLE", "k", "15", "30", "60"), d=d2),
                         b"-ERR CL.THROTTLE and RL.* are off: start divvyd with --allow-client-limits\r\n")

    def test_socket_activated(self):
        # The listeners systemd passes detect RESP too.
        if not harness.socket_activate_path():
            self.skipTest("systemd-socket-activate not found")
        d = self.new_daemon(data_path("verbs.ini"), activate=True)
        d.start(wait_ready=False)
        # systemd-socket-activate starts divvyd at the first connection, queued until accepted.
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
            c.send(harness.resp_command("PING"))
            self.assertEqual(c.sock.recv(64), b"+PONG\r\n")
            d.wait_ready()
        self.assertEqual(self.raw(harness.resp_command("HIT", "path", "/fw", "user", "sa"), kind="unix", d=d),
                         b"*3\r\n:1\r\n:9\r\n:3600\r\n")


class RespLimits(harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = cls.start_shared_daemon(data_path("verbs.ini"), args=["--sync=always"])

    def raw(self, data, kind="tcp"):
        with self.d.connect(kind) as c:
            t = threading.Thread(target=faultlib.send_quietly, args=(c.sock, data, True), daemon=True)
            t.start()
            out = harness.read_until_close(c.sock, reset_ends=True)
            t.join(harness.IO_TIMEOUT)
            return out

    @staticmethod
    def sized(total):
        """A HIT of 62 short pairs, one 8,000-byte value and one padded to make the request
        exactly total bytes long (no bulk over 8,192)."""
        pairs = [x for i in range(62) for x in ("k%d" % i, "v")]
        v = "x" * (total - len(harness.resp_command("HIT", *pairs, "y", "x" * 8000, "z", "")))
        r = harness.resp_command("HIT", *pairs, "y", "x" * 8000, "z", v)
        while len(r) > total:
            v = v[:-1]
            r = harness.resp_command("HIT", *pairs, "y", "x" * 8000, "z", v)
        assert len(r) == total, len(r)
        return r

    def test_at_and_past_each_bound(self):
        deny = b"*3\r\n:0\r\n:0\r\n:-1\r\n"  # verbs.ini's default rule
        err = b"-ERR Protocol error: "
        pairs = lambda n, pre="k": [x for i in range(n) for x in ("%s%d" % (pre, i), "v")]  # noqa: E731
        cases = [
            (self.sized(10368), deny),
            (self.sized(10369), err + b"request longer than the line limit\r\n"),
            (harness.resp_command("HIT", "k", "v" * 8192), deny),
            (harness.resp_command("HIT", "k", "v" * 8193), err + b"bulk string longer than the line limit\r\n"),
            (harness.resp_command("HIT", *pairs(64)), deny),
            (harness.resp_command("HIT", *pairs(65)), b"-ERR unknown too many key=value pairs\r\n"),
            (harness.resp_command("TAKE", "1", *(["k", "v"] * 67)), b"*6\r\n:0\r\n:0\r\n:0\r\n:0\r\n:-1\r\n$2\r\n#9\r\n"),
            (harness.resp_command("TAKE", "1", "@1", *(["k", "v"] * 67)), err + b"too many arguments\r\n"),
            (b"*000000000000000001\r\n$4\r\nPING\r\n", b"+PONG\r\n"),
            (b"*0000000000000000001\r\n$4\r\nPING\r\n", err + b"invalid length\r\n"),
            (b"*-2\r\n", err + b"invalid length\r\n"),
            (b"*1\r\n$-1\r\n", err + b"invalid length\r\n"),
            (b"*0\r\n*-1\r\n\r\n\n" + harness.resp_command("PING"), b"+PONG\r\n"),
        ]
        for i, (data, want) in enumerate(cases):
            with self.subTest(case=i, head=data[:30]):
                self.assertEqual(self.raw(data, "unix" if i % 2 else "tcp"), want)

    def test_maximal_requests_pipelined(self):
        # Three requests of 10,368 bytes and ECHOs of 8,190: the input buffer holds one framed
        # request and part of the next, framed again after each compaction.
        big = self.sized(10368)
        self.assertEqual(self.raw(big * 3), b"*3\r\n:0\r\n:0\r\n:-1\r\n" * 3)
        echoes = [("%05d" % i) * 1638 for i in range(60)]
        want = b"".join(b"$8190\r\n%s\r\n" % e.encode() for e in echoes)
        for kind in ("tcp", "unix"):
            self.assertEqual(self.raw(b"".join(harness.resp_command("ECHO", e) for e in echoes), kind), want)

    def test_resp_then_line(self):
        # The first byte decided RESP: a divvy line after a RESP request is broken framing.
        self.assertEqual(self.raw(harness.resp_command("PING") + b"HIT path=/fw user=x\n" + harness.resp_command("PING")),
                         b"+PONG\r\n-ERR Protocol error: expected '*' (divvyd takes RESP arrays of bulk "
                         b"strings)\r\n")


if __name__ == "__main__":
    harness.main()
