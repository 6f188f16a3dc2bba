#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Envoy's rate limit service over gRPC (issue #34), driven with grpcio (Debian's python3-grpcio)
and the messages of proto/, compiled by grpcfix.load() (grpc_tools.protoc, into a temporary
directory) when the tests start; against tests/data/grpc.ini on a --grpc listener (TCP) and an admin one (Unix).

- ShouldRateLimit: OK with what is left, then OVER_LIMIT; current_limit (requests_per_unit,
  unit, name), limit_remaining and duration_until_reset; a window that is no Envoy unit.
- Two descriptors are all or nothing: when one is over its limit, the other is answered OK but
  not charged (a request of its own afterwards finds its credit untouched), also when a rule that
  always denies decides.
- hits_addend (the request's, a descriptor's, 0 only checks), is_negative_hits on an admin
  listener only, an invalid descriptor (INVALID_ARGUMENT, nothing charged).
- grpc.health.v1.Health/Check, an unknown method (UNIMPLEMENTED), a compressed message
  (UNIMPLEMENTED; sent with nghttp, grpcio does not compress messages this small), the IETF
  RateLimit fields with --grpc-ratelimit-headers.
- A Redis store that is not there: onBackendError decides, or --grpc-backend-error=unavailable
  answers UNAVAILABLE.

More, each class on a daemon of its own (grpcfix.py's client, a controlled clock):

- Reload: a SIGHUP while streams are open, one of them with its message not sent yet; every
  call is answered, and the message sent after the reload is decided by the new rules.
- PeekRefund: peeks (hits_addend 0) charge nothing, also at the limit; --grpc-allow-refunds.
- BadMessages: garbage, a truncated message, a message cut in the middle of a field, one over
  16 KiB: the call fails (INVALID_ARGUMENT, INTERNAL or RESOURCE_EXHAUSTED, or its stream ends
  in an error), nothing is charged, and the other calls on the same connection and on others
  are answered.
- ManyStreams: hundreds of concurrent calls on one channel (one HTTP/2 connection) on one
  counter, and 16 channels at once: exactly the limit is allowed.
- StoreFailure: the Redis store with redis-server killed: each descriptor decided by its rule's
  onBackendError, the request all or nothing.
- EnvoyRequest: a request with the headers Envoy's gRPC client sends (grpc-timeout 20m,
  :authority the cluster's name, x-envoy-*), by nghttp.
- Activation: the gRPC listeners socket-activated (systemd-socket-activate, --fdname grpc).

Run one test:  tests/integration/test_grpc.py Grpc.test_ok_then_over_limit
"""

import concurrent.futures
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

try:
    import grpc
except ImportError:  # a python3 of its own (pyenv): grpcio is Debian's, for Debian's python3
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath(
            "/usr/bin/python3") and not os.environ.get("TEST_GRPC_REEXEC"):
        os.environ["TEST_GRPC_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    grpc = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import data_path  # noqa: E402
import grpcfix  # noqa: E402
import redisfix  # noqa: E402

RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


class Grpc(harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        if grpc is None:
            raise harness.HarnessError("python3-grpcio is missing (tools/bootstrap installs it)")
        modules = grpcfix.load()
        cls.pb, cls.health = modules.rls, modules.health
        cls.grpc_port = harness.free_tcp_port()
        cls.tmp = harness.make_tmpdir()
        cls.addClassCleanup(shutil.rmtree, cls.tmp, True)
        cls.admin_sock = os.path.join(cls.tmp, "grpc-admin.sock")
        cls.d = cls.start_shared_daemon(
            data_path("grpc.ini"),
            args=["--grpc", "tcp:127.0.0.1:%d" % cls.grpc_port, "--grpc", "admin:unix:" + cls.admin_sock,
                  "--grpc-ratelimit-headers"])
        cls.channel = grpc.insecure_channel("127.0.0.1:%d" % cls.grpc_port)
        cls.admin_channel = grpc.insecure_channel("unix:" + cls.admin_sock)
        cls.addClassCleanup(cls.channel.close)
        cls.addClassCleanup(cls.admin_channel.close)

    def rls(self, request, admin=False):
        call = (self.admin_channel if admin else self.channel).unary_unary(
            RLS, request_serializer=self.pb.RateLimitRequest.SerializeToString,
            response_deserializer=self.pb.RateLimitResponse.FromString)
        return call(request, timeout=harness.IO_TIMEOUT)

    def request(self, *descriptors, domain="rl", hits=0):
        """descriptors: lists of (key, value), or (entries, hits_addend or None, negative)."""
        r = self.pb.RateLimitRequest(domain=domain, hits_addend=hits)
        for d in descriptors:
            entries, addend, negative = d if isinstance(d, tuple) else (d, None, False)
            m = r.descriptors.add()
            for k, v in entries:
                m.entries.add(key=k, value=v)
            if addend is not None:
                m.hits_addend.value = addend
            m.is_negative_hits = negative
        return r

    def statuses(self, resp):
        return [(s.code, s.limit_remaining) for s in resp.statuses]

    def code_of(self, request, admin=False):
        with self.assertRaises(grpc.RpcError) as e:
            self.rls(request, admin)
        return e.exception.code(), e.exception.details()

    def test_ok_then_over_limit(self):
        OK, OVER = self.pb.RateLimitResponse.OK, self.pb.RateLimitResponse.OVER_LIMIT
        key = [("generic_key", "a-%d" % os.getpid())]
        for left in (2, 1, 0):
            resp = self.rls(self.request(key))
            self.assertEqual(resp.overall_code, OK)
            self.assertEqual(self.statuses(resp), [(OK, left)])
            s = resp.statuses[0]
            self.assertEqual((s.current_limit.requests_per_unit, s.current_limit.unit, s.current_limit.name),
                             (3, self.pb.RateLimitResponse.RateLimit.MINUTE, "per-key"))
            lo, hi = self.since_start(60)
            self.assertTrue(lo <= s.duration_until_reset.seconds <= hi, s)
        resp = self.rls(self.request(key))
        self.assertEqual(resp.overall_code, OVER)
        self.assertEqual(self.statuses(resp), [(OVER, 0)])
        self.assertGreaterEqual(resp.statuses[0].duration_until_reset.seconds, 1)

    def test_concurrent_calls_on_one_connection(self):
        """More calls at once than SETTINGS_MAX_CONCURRENT_STREAMS (128), on one channel: each is
        answered, and exactly the limit's worth are OK."""
        OK, OVER = self.pb.RateLimitResponse.OK, self.pb.RateLimitResponse.OVER_LIMIT
        call = self.channel.unary_unary(RLS, request_serializer=self.pb.RateLimitRequest.SerializeToString,
                                        response_deserializer=self.pb.RateLimitResponse.FromString)
        req = self.request([("generic_key", "conc-%d" % os.getpid())])
        futures = [call.future(req, timeout=harness.IO_TIMEOUT) for _ in range(300)]
        codes = [f.result().overall_code for f in futures]
        self.assertEqual((codes.count(OK), codes.count(OVER)), (3, 297))

    def test_window_without_unit(self):
        resp = self.rls(self.request([("tenant", "t-%d" % os.getpid())]))
        lim = resp.statuses[0].current_limit
        self.assertEqual((lim.requests_per_unit, lim.unit, lim.name),
                         (5, self.pb.RateLimitResponse.RateLimit.UNKNOWN, "per-tenant"))
        self.assertEqual(resp.statuses[0].limit_remaining, 4)

    def test_two_descriptors_all_or_nothing(self):
        OK, OVER = self.pb.RateLimitResponse.OK, self.pb.RateLimitResponse.OVER_LIMIT
        user = [("user", "u-%d" % os.getpid())]
        key = [("generic_key", "b-%d" % os.getpid())]
        self.assertEqual(self.statuses(self.rls(self.request(user, key))), [(OK, 1), (OK, 2)])
        self.assertEqual(self.statuses(self.rls(self.request(user, key))), [(OK, 0), (OK, 1)])
        # the user is over: the key is answered OK with what it had, and not charged
        resp = self.rls(self.request(key, user))
        self.assertEqual(resp.overall_code, OVER)
        self.assertEqual(self.statuses(resp), [(OK, 1), (OVER, 0)])
        self.assertEqual(self.statuses(self.rls(self.request(key))), [(OK, 0)])

    def test_always_deny_charges_nothing(self):
        OK, OVER = self.pb.RateLimitResponse.OK, self.pb.RateLimitResponse.OVER_LIMIT
        key = [("generic_key", "c-%d" % os.getpid())]
        resp = self.rls(self.request(key, [("path", "/closed")]))
        self.assertEqual(resp.overall_code, OVER)
        self.assertEqual([s.code for s in resp.statuses], [OK, OVER])
        self.assertEqual(resp.statuses[0].limit_remaining, 3)  # what it had
        self.assertEqual(self.statuses(self.rls(self.request(key))), [(OK, 2)])

    def test_hits_addend(self):
        OK, OVER = self.pb.RateLimitResponse.OK, self.pb.RateLimitResponse.OVER_LIMIT
        key = [("generic_key", "d-%d" % os.getpid())]
        self.assertEqual(self.statuses(self.rls(self.request(key, hits=2))), [(OK, 1)])
        # a descriptor's own hits_addend overrides the request's; 0 only checks
        self.assertEqual(self.statuses(self.rls(self.request((key, 0, False), hits=3))), [(OK, 1)])
        self.assertEqual(self.statuses(self.rls(self.request((key, 2, False), hits=1))), [(OVER, 1)])
        self.assertEqual(self.statuses(self.rls(self.request(key))), [(OK, 0)])

    def test_refund_on_admin_listener_only(self):
        OK = self.pb.RateLimitResponse.OK
        key = [("generic_key", "e-%d" % os.getpid())]
        self.assertEqual(self.statuses(self.rls(self.request(key, hits=3))), [(OK, 0)])
        code, _ = self.code_of(self.request((key, 2, True)))
        self.assertEqual(code, grpc.StatusCode.PERMISSION_DENIED)
        self.assertEqual(self.statuses(self.rls(self.request((key, 2, True)), admin=True)), [(OK, 2)])
        self.assertEqual(self.statuses(self.rls(self.request(key))), [(OK, 1)])

    def test_invalid_descriptor_charges_nothing(self):
        OK = self.pb.RateLimitResponse.OK
        key = [("generic_key", "f-%d" % os.getpid())]
        for bad in (self.request(key, [("user", "x"), ("user", "y")]),  # a key twice
                    self.request(key, [("domain", "other")]),  # domain is the request's
                    self.request(key, [("", "v")]),  # an empty key
                    self.request(key, domain=""),
                    self.request()):
            code, details = self.code_of(bad)
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, details)
        self.assertEqual(self.statuses(self.rls(self.request(key))), [(OK, 2)])

    def test_ratelimit_headers(self):
        key = [("generic_key", "g-%d" % os.getpid())]
        resp = self.rls(self.request(key))
        headers = {h.key: h.value for h in resp.response_headers_to_add}
        self.assertEqual(headers["RateLimit-Policy"], '"per-key";q=3;w=60')
        lo, hi = self.since_start(60)
        name, r, t = headers["RateLimit"].split(";")
        self.assertEqual((name, r), ('"per-key"', "r=2"))
        self.assertTrue(lo <= int(t[2:]) <= hi, headers)

    def test_health(self):
        check = self.channel.unary_unary("/grpc.health.v1.Health/Check",
                                         request_serializer=self.health.HealthCheckRequest.SerializeToString,
                                         response_deserializer=self.health.HealthCheckResponse.FromString)
        for service in ("", "envoy.service.ratelimit.v3.RateLimitService"):
            self.assertEqual(check(self.health.HealthCheckRequest(service=service), timeout=harness.IO_TIMEOUT).status,
                             self.health.HealthCheckResponse.SERVING)
        with self.assertRaises(grpc.RpcError) as e:
            check(self.health.HealthCheckRequest(service="other"), timeout=harness.IO_TIMEOUT)
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)

    def test_unknown_method(self):
        call = self.channel.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/Other",
                                        request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with self.assertRaises(grpc.RpcError) as e:
            call(b"", timeout=harness.IO_TIMEOUT)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        # the connection serves on
        self.rls(self.request([("generic_key", "h-%d" % os.getpid())]))

    def test_compressed_message(self):
        nghttp = shutil.which("nghttp")
        if not nghttp:
            self.fail("nghttp is missing (nghttp2-client; tools/bootstrap installs it)")
        key = [("generic_key", "i-%d" % os.getpid())]
        body = self.request(key).SerializeToString()
        path = os.path.join(self.tmp, "compressed.bin")
        with open(path, "wb") as f:  # flag 1: compressed by the grpc-encoding named
            f.write(bytes([1]) + len(body).to_bytes(4, "big") + body)
        out = subprocess.run([nghttp, "-v", "-d", path, "-H", "content-type: application/grpc", "-H",
                              "grpc-encoding: gzip", "-H", "te: trailers",
                              "http://127.0.0.1:%d%s" % (self.grpc_port, RLS)],
                             capture_output=True, text=True, timeout=harness.IO_TIMEOUT)
        self.assertIn("grpc-status: 12", out.stdout, out.stdout + out.stderr)
        # nothing was charged
        self.assertEqual(self.statuses(self.rls(self.request(key))), [(self.pb.RateLimitResponse.OK, 2)])

    def nghttp(self, body, *headers):
        nghttp = shutil.which("nghttp")
        if not nghttp:
            self.fail("nghttp is missing (nghttp2-client; tools/bootstrap installs it)")
        path = os.path.join(self.tmp, "body-%d.bin" % len(body))
        with open(path, "wb") as f:
            f.write(body)
        cmd = [nghttp, "-v", "-d", path, "-H", "content-type: application/grpc", "-H", "te: trailers"]
        for h in headers:
            cmd += ["-H", h]
        out = subprocess.run(cmd + ["http://127.0.0.1:%d%s" % (self.grpc_port, RLS)],
                             capture_output=True, text=True, timeout=harness.IO_TIMEOUT)
        return out.stdout + out.stderr

    def test_message_too_large(self):
        # 16 KiB is the most: one byte more is refused, on its stream only
        body = bytes(16 * 1024 + 1)
        out = self.nghttp(bytes([0]) + len(body).to_bytes(4, "big") + body)
        self.assertIn("grpc-status: 8", out, out)
        self.rls(self.request([("generic_key", "j-%d" % os.getpid())]))

    def test_not_http2_closes_that_connection(self):
        with socket.create_connection(("127.0.0.1", self.grpc_port), timeout=harness.IO_TIMEOUT) as s:
            s.sendall(b"HIT generic_key=x\n" * 4)
            data = harness.read_until_close(s, reset_ends=True)
        # our SETTINGS, then a GOAWAY (type 7) before the close
        self.assertIn(b"\x07", data[:200])
        self.rls(self.request([("generic_key", "k-%d" % os.getpid())]))


def h2_frame(kind, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def hpack_literal(name, value):
    """A header field as HPACK's literal without indexing, new name, no Huffman (names and values
    under 127 bytes)."""
    return bytes([0, len(name)]) + name + bytes([len(value)]) + value


class GrpcRequestTimeout(harness.DaemonTestCase):
    """A call whose HEADERS came and whose message never does: the connection is closed after
    --request-timeout, as a line client's that never finishes its line; one that finishes its
    calls stays."""

    def test_incomplete_call_closes_its_connection(self):
        port = harness.free_tcp_port()
        self.start_daemon(data_path("grpc.ini"), args=["--grpc", "tcp:127.0.0.1:%d" % port, "--request-timeout", "1"])
        headers = b"".join(hpack_literal(k, v) for k, v in (
            (b":method", b"POST"), (b":scheme", b"http"), (b":path", RLS.encode()), (b":authority", b"x"),
            (b"content-type", b"application/grpc"), (b"te", b"trailers")))
        with socket.create_connection(("127.0.0.1", port), timeout=harness.IO_TIMEOUT) as s:
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b"") +
                      h2_frame(1, 0x4, 1, headers))  # HEADERS, END_HEADERS, no END_STREAM
            data = harness.read_until_close(s, reset_ends=True)  # bounded by IO_TIMEOUT
        # our SETTINGS and its ACK came; no answer to the call (no HEADERS frame, type 1)
        frames, i = [], 0
        while i + 9 <= len(data):
            n = int.from_bytes(data[i:i + 3], "big")
            frames.append(data[i + 3])
            i += 9 + n
        self.assertIn(4, frames)
        self.assertNotIn(1, frames)


class GrpcBackendError(harness.DaemonTestCase):
    """--store on a Redis that is not there: the rules' onBackendError decides (local, the
    default), or with --grpc-backend-error=unavailable the call gets UNAVAILABLE."""

    @classmethod
    def setUpClass(cls):
        if grpc is None:
            raise harness.HarnessError("python3-grpcio is missing (tools/bootstrap installs it)")
        modules = grpcfix.load()
        cls.pb, cls.health = modules.rls, modules.health

    def call(self, *args):
        port = harness.free_tcp_port()
        dead = harness.free_tcp_port()  # nothing listens there
        self.start_daemon(data_path("grpc.ini"),
                          args=["--store", "redis://127.0.0.1:%d" % dead, "--backend-timeout", "50",
                                "--grpc", "tcp:127.0.0.1:%d" % port] + list(args))
        r = self.pb.RateLimitRequest(domain="rl")
        r.descriptors.add().entries.add(key="generic_key", value="z")
        with grpc.insecure_channel("127.0.0.1:%d" % port) as ch:
            call = ch.unary_unary(RLS, request_serializer=self.pb.RateLimitRequest.SerializeToString,
                                  response_deserializer=self.pb.RateLimitResponse.FromString)
            try:
                return call(r, timeout=harness.IO_TIMEOUT)
            except grpc.RpcError as e:
                return e.code()

    def test_rules_decide(self):
        resp = self.call()
        self.assertEqual([(s.code, s.limit_remaining) for s in resp.statuses], [(self.pb.RateLimitResponse.OK, 2)])

    def test_unavailable(self):
        self.assertEqual(self.call("--grpc-backend-error=unavailable"), grpc.StatusCode.UNAVAILABLE)

    def test_deadline_exceeded(self):
        """grpc-timeout 100 ms on a Redis that accepts and never answers (--backend-timeout 2 s):
        the answer comes after the deadline, so it is DEADLINE_EXCEEDED (sent with nghttp, which
        has no deadline of its own)."""
        nghttp = shutil.which("nghttp")
        if not nghttp:
            self.fail("nghttp is missing (nghttp2-client; tools/bootstrap installs it)")
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(16)
            port = harness.free_tcp_port()
            d = self.start_daemon(data_path("grpc.ini"),
                                  args=["--store", "redis://127.0.0.1:%d" % silent.getsockname()[1],
                                        "--backend-timeout", "2000", "--grpc", "tcp:127.0.0.1:%d" % port])
            r = self.pb.RateLimitRequest(domain="rl")
            r.descriptors.add().entries.add(key="generic_key", value="late")
            body = r.SerializeToString()
            path = os.path.join(d.tmpdir, "late.bin")
            with open(path, "wb") as f:
                f.write(bytes([0]) + len(body).to_bytes(4, "big") + body)
            out = subprocess.run([nghttp, "-v", "-d", path, "-H", "content-type: application/grpc", "-H",
                                  "te: trailers", "-H", "grpc-timeout: 100m",
                                  "http://127.0.0.1:%d%s" % (port, RLS)],
                                 capture_output=True, text=True, timeout=harness.IO_TIMEOUT)
        self.assertIn("grpc-status: 4", out.stdout, out.stdout + out.stderr)


def write_rules(tmpdir, text, name="rules.ini"):
    path = os.path.join(tmpdir, name)
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    return path


def ini(*rules):
    """A rules file: each rule (section, creditLimit, extra attributes), one counter per value
    of u for an hour; everything else denied."""
    out = []
    for section, limit, *extra in rules:
        out.append("[%s]\ncreditLimit = %d\nresetSeconds = 3600\nactorField = u\n%s" %
                   (section, limit, "".join("%s\n" % e for e in extra)))
    return "\n".join(out + ["[default]\ncreditLimit = 0\nresetSeconds = 0\n"])


def grpc_args(sock):
    """divvyd's options for a gRPC listener on the Unix socket sock."""
    return ["--grpc", "unix:" + sock]


class GrpcCase(harness.DaemonTestCase):
    """A daemon with a gRPC listener on a Unix socket, on rules given as INI text."""

    NOW_NS = 1764028800 * 10**9  # the daemons' clock, frozen: every reset is exact

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        grpcfix.load()
        tmp = harness.make_tmpdir()
        cls.addClassCleanup(shutil.rmtree, tmp, True)
        cls.clock = harness.FakeClock(tmp)
        cls.addClassCleanup(cls.clock.close)
        cls.clock.set(cls.NOW_NS)

    def start_grpc(self, rules, args=(), **kw):
        tmp = harness.make_tmpdir()
        self.addCleanup(shutil.rmtree, tmp, True)
        self.rules_path = write_rules(tmp, rules)
        self.sock = os.path.join(tmp, "grpc.sock")
        d = self.start_daemon(self.rules_path, tmpdir=tmp, args=grpc_args(self.sock) + list(args),
                              env=self.clock.env(), **kw)
        return d

    def client(self, sock=None):
        c = grpcfix.Client("unix:" + (sock or self.sock))
        self.addCleanup(c.close)
        return c

    def check(self, c, domain, descriptors, expect_overall, expect_statuses, hits=0, resets=True):
        resp = c.should_rate_limit(grpcfix.request(domain, descriptors, hits))
        self.assertEqual((grpcfix.code_name(resp.overall_code), grpcfix.statuses_text(resp, resets)),
                         (expect_overall, expect_statuses), "%s %r" % (domain, descriptors))
        return resp


RULES_A = ini(("domain=r u=*", 5))

RULES_B = ini(("domain=r u=*", 7))


class Reload(GrpcCase):
    def test_sighup_while_streams_are_open(self):
        d = self.start_grpc(RULES_A)
        finish = d.drain_notes_in_background(self)
        c1, c2 = self.client(), self.client()
        # before: 5 a window (remaining 4 after the first)
        self.check(c1, "r", [[("u", "before")]], "OK", ["OK 5/HOUR 4 3600"])
        # a stream opened, its HEADERS sent, its message held back until after the reload
        go = threading.Event()
        pb = grpcfix.load()

        def held():
            go.wait(harness.IO_TIMEOUT)
            yield grpcfix.request("r", [[("u", "held")]], 1)

        call = c1.channel.stream_unary(grpcfix.SERVICE + "ShouldRateLimit",
                                       request_serializer=pb.rls.RateLimitRequest.SerializeToString,
                                       response_deserializer=pb.rls.RateLimitResponse.FromString)
        held_future = call.future(held(), timeout=2 * harness.IO_TIMEOUT)
        # load on the second connection across the reload: every call answered
        stop = threading.Event()
        answered, errors = [], []

        def load():
            while not stop.is_set() and len(answered) < 100000:
                try:
                    r = c2.should_rate_limit(grpcfix.request("r", [[("u", "load")]], 1))
                    answered.append(r.overall_code)
                except grpc.RpcError as e:
                    errors.append(e)
                    return

        def wait_answered(n):  # bounded: until the load has more than n answers
            deadline = time.monotonic() + harness.IO_TIMEOUT
            while len(answered) <= n and not errors and time.monotonic() < deadline:
                time.sleep(0.001)
            return len(answered)

        t = threading.Thread(target=load)
        t.start()
        self.addCleanup(t.join, harness.IO_TIMEOUT)
        self.addCleanup(stop.set)
        n_before = wait_answered(0)  # the load runs when the signal comes
        write_rules(os.path.dirname(self.rules_path), RULES_B)
        finish()
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        seq, _ = d.wait_note("RELOADING=1", after=before)
        d.wait_note("READY=1", after=seq, what="READY=1 after RELOADING=1")
        n_at_ready = len(answered)
        n_after = wait_answered(n_at_ready)  # and goes on after it, on the same connection
        go.set()
        resp = held_future.result(timeout=harness.IO_TIMEOUT)
        # answers continue after the reload on the connection that was loaded through it
        r = c2.should_rate_limit(grpcfix.request("r", [[("u", "after")]], 1))
        stop.set()
        t.join(harness.IO_TIMEOUT)
        self.assertEqual(errors, [])
        self.assertGreater(n_before, 0)
        self.assertGreater(n_after, n_at_ready)
        # the new rules decide the message sent after the reload, and every later call
        self.assertEqual(grpcfix.statuses_text(resp), ["OK 7/HOUR 6 3600"])
        self.assertEqual(grpcfix.statuses_text(r), ["OK 7/HOUR 6 3600"])
        # the limit changed: the counter of before the reload starts afresh (divvyd.rules(5))
        self.check(c1, "r", [[("u", "before")]], "OK", ["OK 7/HOUR 6 3600"], hits=1)


class PeekRefund(GrpcCase):
    RULES = ini(("domain=p u=*", 3))

    def test_peek_charges_nothing(self):
        self.start_grpc(self.RULES)
        c = self.client()
        peek = lambda: grpcfix.request("p", [grpcfix.descriptor([("u", "a")], hits_addend=0)], 1)
        take = lambda: grpcfix.request("p", [[("u", "a")]], 1)
        for _ in range(3):  # (a counter never hit has no window yet: its reset is not checked)
            self.assertEqual(grpcfix.statuses_text(c.should_rate_limit(peek()), resets=False), ["OK 3/HOUR 3"])
        self.assertEqual(grpcfix.statuses_text(c.should_rate_limit(take())), ["OK 3/HOUR 2 3600"])
        self.assertEqual(grpcfix.statuses_text(c.should_rate_limit(peek())), ["OK 3/HOUR 2 3600"])
        for remaining in (1, 0):
            self.assertEqual(grpcfix.statuses_text(c.should_rate_limit(take())),
                             ["OK 3/HOUR %d 3600" % remaining])
        # exhausted: a peek asks for nothing, so it is OK with 0 left (envoyproxy/ratelimit too:
        # over only when the count after adding 0 exceeds the limit); a take is over, and the
        # peek after it shows that nothing was charged
        self.assertEqual(grpcfix.statuses_text(c.should_rate_limit(peek())), ["OK 3/HOUR 0 3600"])
        self.assertEqual(grpcfix.statuses_text(c.should_rate_limit(take())), ["OVER_LIMIT 3/HOUR 0 3600"])
        self.assertEqual(grpcfix.statuses_text(c.should_rate_limit(peek())), ["OK 3/HOUR 0 3600"])

    def refund(self, c, n):
        return c.should_rate_limit(grpcfix.request(
            "p", [grpcfix.descriptor([("u", "r")], hits_addend=n, negative=True)], 1))

    def test_refund_where_allowed(self):
        d = self.start_grpc(self.RULES, args=["--grpc-allow-refunds"])
        c = self.client()
        for remaining in (2, 1, 0):
            self.check(c, "p", [[("u", "r")]], "OK", ["OK 3/HOUR %d 3600" % remaining], hits=1)
        self.assertEqual(grpcfix.statuses_text(self.refund(c, 2)), ["OK 3/HOUR 2 3600"])
        self.check(c, "p", [[("u", "r")]], "OK", ["OK 3/HOUR 1 3600"], hits=1)
        self.assertTrue(d.running())


def framed(payload, length=None):
    """gRPC's length-prefixed message: not compressed, length (default: the payload's)."""
    return b"\0" + struct.pack(">I", len(payload) if length is None else length) + payload


class BadMessages(GrpcCase):
    RULES = PeekRefund.RULES

    def test_bad_messages_fail_only_their_call(self):
        self.start_grpc(self.RULES)
        c, other = self.client(), self.client()
        good = grpcfix.request("p", [[("u", "bad")]], 1).SerializeToString()
        method = grpcfix.SERVICE + "ShouldRateLimit"
        bad = [
            b"\xff\xff\xff\xff\xff\xff\xff",  # garbage: a varint longer than 10 bytes
            good[:len(good) - 3],  # cut in the middle of a field
            b"\x0a\x10abc",  # a string field claiming 16 bytes, 3 there
            b"\x12\x05\x0a\x03\x0a\x01",  # a descriptor cut inside its entry
        ]
        for payload in bad:
            with self.assertRaises(grpc.RpcError, msg=payload) as e:
                c.raw(method, payload)
            self.assertIn(e.exception.code(), (grpc.StatusCode.INVALID_ARGUMENT,
                                               grpc.StatusCode.INTERNAL), payload)
            # the same connection and another one still answer; nothing was charged
        for ch in (c, other):
            resp = ch.should_rate_limit(grpcfix.request("p", [grpcfix.descriptor([("u", "bad")], 0)]))
            self.assertEqual(grpcfix.code_name(resp.overall_code), "OK")
        resp = c.should_rate_limit(grpcfix.request("p", [[("u", "bad")]], 1))
        self.assertEqual(grpcfix.statuses_text(resp), ["OK 3/HOUR 2 3600"])

    def test_oversized_message(self):
        # over divvyd's 16 KiB a message (divvyd(8)): nothing charged, the connection serves on,
        # and the call's status is RESOURCE_EXHAUSTED
        self.start_grpc(self.RULES)
        c = self.client()
        with self.assertRaises(grpc.RpcError) as e:
            c.should_rate_limit(grpcfix.request("p", [[("u", "big"), ("pad", "x" * 20000)]], 1))
        self.check(c, "p", [[("u", "big")]], "OK", ["OK 3/HOUR 2 3600"], hits=1)
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED, e.exception.details())

    def test_truncated_frame_fails_only_its_stream(self):
        # a gRPC prefix announcing more bytes than the stream carries before its end, sent by
        # nghttp on a connection of its own: the stream ends with an error, the daemon answers on
        if not shutil.which("nghttp"):
            self.skipTest("nghttp not installed (Debian: nghttp2-client)")
        port = harness.free_tcp_port()
        d = self.start_grpc(self.RULES, args=["--grpc", "tcp:127.0.0.1:%d" % port])
        body = os.path.join(d.tmpdir, "truncated")
        payload = grpcfix.request("p", [[("u", "t")]], 1).SerializeToString()
        with open(body, "wb") as f:
            f.write(framed(payload, len(payload) + 50))
        out = nghttp(port, body)
        status = re.findall(r"grpc-status: (\d+)", out)
        self.assertTrue(status in (["3"], ["13"]) or "RST_STREAM" in out, out)
        c = self.client()
        self.check(c, "p", [[("u", "t")]], "OK", ["OK 3/HOUR 2 3600"], hits=1)


def nghttp(port, body, headers=()):
    """One POST of file body to ShouldRateLimit on 127.0.0.1:port by nghttp -v: its output."""
    cmd = ["nghttp", "-v", "-n", "-H", "content-type: application/grpc", "-H", "te: trailers",
           "--data=" + body] + [a for h in headers for a in ("-H", h)] + \
        ["http://127.0.0.1:%d%sShouldRateLimit" % (port, grpcfix.SERVICE)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=harness.IO_TIMEOUT)
    return p.stdout + p.stderr


class ManyStreams(GrpcCase):
    RULES = ini(("domain=m u=*", 250))

    def test_concurrent_streams_on_one_channel(self):
        self.start_grpc(self.RULES)
        c = self.client()
        n = 600
        req = grpcfix.request("m", [[("u", "one")]], 1)
        futures = [c.should_rate_limit_call.future(req, timeout=4 * harness.IO_TIMEOUT)
                   for _ in range(n)]
        codes = [grpcfix.code_name(f.result().overall_code) for f in futures]
        self.assertEqual((codes.count("OK"), codes.count("OVER_LIMIT")), (250, n - 250))
        remaining = sorted(f.result().statuses[0].limit_remaining for f in futures)
        self.assertEqual(remaining[n - 250:], list(range(250)))

    def test_many_channels_at_once(self):
        self.start_grpc(self.RULES)
        clients = [self.client() for _ in range(16)]
        req = grpcfix.request("m", [[("u", "spread")]], 1)
        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            codes = list(ex.map(lambda i: grpcfix.code_name(
                clients[i % 16].should_rate_limit(req).overall_code), range(400)))
        self.assertEqual(codes.count("OK"), 250)


class EnvoyRequest(GrpcCase):
    RULES = PeekRefund.RULES

    def test_envoy_headers(self):
        if not shutil.which("nghttp"):
            self.skipTest("nghttp not installed (Debian: nghttp2-client)")
        port = harness.free_tcp_port()
        d = self.start_grpc(self.RULES, args=["--grpc", "tcp:127.0.0.1:%d" % port])
        body = os.path.join(d.tmpdir, "envoy")
        with open(body, "wb") as f:
            f.write(framed(grpcfix.request("p", [[("u", "envoy")]], 1).SerializeToString()))
        # what Envoy's gRPC client (envoy_grpc) adds to a rate-limit call with the filter's
        # default timeout of 20 ms
        out = nghttp(port, body, [":authority: divvyd", "grpc-timeout: 20m", "x-envoy-internal: true",
                                  "x-envoy-expected-rq-timeout-ms: 20", "x-forwarded-for: 10.0.0.1"])
        self.assertIn("grpc-status: 0", out)
        self.assertRegex(out, r":status: 200")
        self.assertIn("content-type: application/grpc", out)


class StoreFailure(GrpcCase):
    RULES = ini(("domain=f type=allow u=*", 2, "onBackendError = allow"),
                ("domain=f type=deny u=*", 2, "onBackendError = deny"))

    def test_redis_killed(self):
        why = redisfix.missing()
        if why:
            self.skipTest(why)
        with redisfix.RedisServer() as r:
            self.start_grpc(self.RULES, args=["--store=%s" % r.url(), "--backend-timeout=200"])
            c = self.client()
            allow, deny = [("type", "allow"), ("u", "x")], [("type", "deny"), ("u", "x")]
            # (the Redis store reads the server's clock: the resets are not checked)
            self.check(c, "f", [allow, deny], "OK", ["OK 2/HOUR 1", "OK 2/HOUR 1"], hits=1, resets=False)
            r.kill()
            for _ in range(3):  # past the limit too: nothing is counted while Redis is away
                resp = c.should_rate_limit(grpcfix.request("f", [allow], 1))
                self.assertEqual(grpcfix.code_name(resp.overall_code), "OK")
                resp = c.should_rate_limit(grpcfix.request("f", [deny], 1))
                self.assertEqual(grpcfix.code_name(resp.overall_code), "OVER_LIMIT")
                resp = c.should_rate_limit(grpcfix.request("f", [allow, deny], 1))
                self.assertEqual([grpcfix.code_name(s.code) for s in resp.statuses], ["OK", "OVER_LIMIT"])
                self.assertEqual(grpcfix.code_name(resp.overall_code), "OVER_LIMIT")


    def test_redis_killed_unavailable(self):
        # --grpc-backend-error=unavailable: Envoy's failure_mode_deny decides instead
        why = redisfix.missing()
        if why:
            self.skipTest(why)
        with redisfix.RedisServer() as r:
            self.start_grpc(self.RULES, args=["--store=%s" % r.url(), "--backend-timeout=200",
                                              "--grpc-backend-error=unavailable"])
            c = self.client()
            allow = [("type", "allow"), ("u", "y")]
            self.check(c, "f", [allow], "OK", ["OK 2/HOUR 1"], hits=1, resets=False)
            r.kill()
            for _ in range(3):
                with self.assertRaises(grpc.RpcError) as e:
                    c.should_rate_limit(grpcfix.request("f", [allow], 1))
                self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
            # the connection serves on: a call that needs no store (the default rule denies:
            # creditLimit 0, no window, so no Envoy unit and no reset)
            self.check(c, "f", [[("other", "x")]], "OVER_LIMIT", ["OVER_LIMIT 0/UNKNOWN 0 -"], hits=1)


class CallMetrics(GrpcCase):
    """divvyd_grpc_calls_total: every call answered, by method and grpc-status, also those the
    gRPC front-end refuses by itself."""

    def test_calls_counted_by_method_and_code(self):
        port = harness.free_tcp_port()
        self.start_grpc(ini(("domain=r u=*", 5)), args=["--http-port=%d" % port])
        c = self.client()
        c.should_rate_limit(grpcfix.request("r", [[("u", "a")]]))
        c.should_rate_limit(grpcfix.request("r", [[("u", "a")]]))
        c.health()
        for method, payload, code in (
                (grpcfix.SERVICE + "ShouldRateLimit", grpcfix.request("r", []).SerializeToString(),
                 grpc.StatusCode.INVALID_ARGUMENT),  # no descriptor
                (grpcfix.SERVICE + "ShouldRateLimit", b"\x0a" * 20000, grpc.StatusCode.RESOURCE_EXHAUSTED),
                (grpcfix.SERVICE + "Other", b"", grpc.StatusCode.UNIMPLEMENTED),
                (grpcfix.HEALTH + "Check", b"\x0a\x05other", grpc.StatusCode.NOT_FOUND)):
            with self.assertRaises(grpc.RpcError) as e:
                c.raw(method, payload)
            self.assertEqual(e.exception.code(), code, method)
        samples = harness.prometheus_samples(harness.http_get(port)[2])
        calls = {k: v for k, v in samples.items() if k.startswith("divvyd_grpc_calls_total")}
        self.assertEqual(calls, {
            'divvyd_grpc_calls_total{method="ShouldRateLimit",code="OK"}': 2,
            'divvyd_grpc_calls_total{method="ShouldRateLimit",code="INVALID_ARGUMENT"}': 1,
            'divvyd_grpc_calls_total{method="ShouldRateLimit",code="RESOURCE_EXHAUSTED"}': 1,
            'divvyd_grpc_calls_total{method="unknown",code="UNIMPLEMENTED"}': 1,
            'divvyd_grpc_calls_total{method="Check",code="OK"}': 1,
            'divvyd_grpc_calls_total{method="Check",code="NOT_FOUND"}': 1})


def h2_frames(data):
    """[(type, flags, stream, payload)] of the whole frames in data, and the bytes left."""
    out, i = [], 0
    while i + 9 <= len(data):
        n = int.from_bytes(data[i:i + 3], "big")
        if i + 9 + n > len(data):
            break
        out.append((data[i + 3], data[i + 4], int.from_bytes(data[i + 5:i + 9], "big") & 0x7fffffff,
                    data[i + 9:i + 9 + n]))
        i += 9 + n
    return out, data[i:]


class HttpApiAgrees(GrpcCase):
    """The HTTP API's /json decides a request's descriptors as ShouldRateLimit does: all or
    nothing, each status the same (code, remaining, current limit), on one daemon serving both."""

    RULES = """\
[domain=e ip=*]
creditLimit = 2
resetSeconds = 60
actorField = ip
label = per-ip

[domain=e user=*]
creditLimit = 3
resetSeconds = 60
actorField = user
label = per-user

[default]
creditLimit = 0
resetSeconds = 0
"""

    def test_json_statuses_are_grpc_statuses(self):
        import http.client
        import json

        port = harness.free_tcp_port()
        self.start_grpc(self.RULES, args=["--http-api=tcp:127.0.0.1:%d" % port])
        c = self.client()
        unit = load_unit_names()

        def over_grpc(descriptors):
            resp = c.should_rate_limit(grpcfix.request("e", [
                grpcfix.descriptor(entries, hits_addend=hits) for entries, hits in descriptors]))
            return (grpcfix.code_name(resp.overall_code), [
                (grpcfix.code_name(st.code), st.limit_remaining,
                 (st.current_limit.requests_per_unit, unit(st.current_limit.unit), st.current_limit.name)
                 if st.HasField("current_limit") else None) for st in resp.statuses])

        def over_http(descriptors):
            body = {"domain": "e", "descriptors": [
                dict({"entries": [{"key": k, "value": v} for k, v in entries]},
                     **({} if hits is None else {"hits_addend": hits})) for entries, hits in descriptors]}
            h = http.client.HTTPConnection("127.0.0.1", port, timeout=harness.IO_TIMEOUT)
            try:
                h.request("POST", "/json", body=json.dumps(body))
                r = h.getresponse()
                reply = json.loads(r.read())
            finally:
                h.close()
            self.assertEqual(r.status, 200 if reply["overallCode"] == "OK" else 429)
            return (reply["overallCode"], [
                (st["code"], st.get("limitRemaining", 0),
                 (st["currentLimit"].get("requestsPerUnit", 0), st["currentLimit"].get("unit", "UNKNOWN"),
                  st["currentLimit"].get("name", "")) if "currentLimit" in st else None)
                for st in reply["statuses"]])

        def steps(tag):
            ip, user = ([("ip", "10.0.0.1-" + tag)], None), ([("user", "u-" + tag)], None)
            peek, closed = ([("user", "u-" + tag)], 0), ([("closed", "1")], None)
            return [[ip, user], [ip, user], [user, ip], [peek], [user, closed], [peek]]

        per_ip, per_user = (2, "MINUTE", "per-ip"), (3, "MINUTE", "per-user")
        want = [("OK", [("OK", 1, per_ip), ("OK", 2, per_user)]),
                ("OK", [("OK", 0, per_ip), ("OK", 1, per_user)]),
                ("OVER_LIMIT", [("OK", 1, per_user), ("OVER_LIMIT", 0, per_ip)]),  # not charged
                ("OK", [("OK", 1, per_user)]),
                ("OVER_LIMIT", [("OK", 1, per_user), ("OVER_LIMIT", 0, (0, "UNKNOWN", ""))]),  # always denies
                ("OK", [("OK", 1, per_user)])]
        self.assertEqual([over_grpc(d) for d in steps("grpc")], want)
        self.assertEqual([over_http(d) for d in steps("http")], want)


def load_unit_names():
    return grpcfix.load().rls.RateLimitResponse.RateLimit.Unit.Name


class Draining(GrpcCase):
    """Health/Check answers NOT_SERVING once the daemon stops (SIGTERM) and drains: a call begun
    before the stop (its HEADERS sent), its message sent during the drain."""

    HEADERS = b"".join(hpack_literal(k, v) for k, v in (
        (b":method", b"POST"), (b":scheme", b"http"), (b":path", (grpcfix.HEALTH + "Check").encode()),
        (b":authority", b"x"), (b"content-type", b"application/grpc"), (b"te", b"trailers")))
    MESSAGE = b"\x00\x00\x00\x00\x00"  # HealthCheckRequest{service: ""}, framed

    def read_until(self, s, data, want):
        """Reads frames until want(frame) is true: (that frame, the bytes after it); bounded by
        IO_TIMEOUT."""
        deadline = time.monotonic() + harness.IO_TIMEOUT
        while time.monotonic() < deadline:
            frames, rest = h2_frames(data)
            for i, f in enumerate(frames):
                if want(f):
                    after = b"".join(h2_frame(k, fl, sid, p) for k, fl, sid, p in frames[i + 1:])
                    return f, after + rest
            data = rest
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        self.fail("the connection ended or stalled before the frame awaited")

    def health_status(self, s, stream, data):
        def answer(f):
            self.assertFalse(f[0] == 3 and f[2] == stream, "stream %d reset" % stream)
            return f[0] == 0 and f[2] == stream and len(f[3]) >= 5
        f, data = self.read_until(s, data, answer)
        return grpcfix.load().health.HealthCheckResponse.FromString(f[3][5:]).status, data

    def test_not_serving_while_draining(self):
        d = self.start_grpc(ini(("domain=r u=*", 5)))
        health = grpcfix.load().health.HealthCheckResponse
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(harness.IO_TIMEOUT)
            s.connect(self.sock)
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + h2_frame(4, 0, 0, b"") +
                      h2_frame(1, 0x4, 1, self.HEADERS) + h2_frame(0, 0x1, 1, self.MESSAGE))
            status, data = self.health_status(s, 1, b"")
            self.assertEqual(status, health.SERVING)
            # the second call's HEADERS (no END_STREAM), then a PING: its ACK says the daemon
            # has read them (the call is open when the stop comes)
            s.sendall(h2_frame(4, 0x1, 0, b"") + h2_frame(1, 0x4, 3, self.HEADERS) +
                      h2_frame(6, 0, 0, b"12345678"))
            _, data = self.read_until(s, data, lambda f: f[0] == 6 and f[1] & 0x1)
            seq = d.last_seq()
            d.signal(signal.SIGTERM)
            d.wait_note("STOPPING=1", after=seq)
            s.sendall(h2_frame(0, 0x1, 3, self.MESSAGE))
            status, _ = self.health_status(s, 3, data)
            self.assertEqual(status, health.NOT_SERVING)
        self.assertEqual(d.wait_exit(), 0)


class Activation(GrpcCase):
    def test_socket_activated_grpc_listener(self):
        sa = harness.socket_activate_path()
        if not sa:
            self.skipTest("systemd-socket-activate not found")
        tmp = harness.make_tmpdir()
        self.addCleanup(shutil.rmtree, tmp, True)
        rules = write_rules(tmp, PeekRefund.RULES)
        sock = os.path.join(tmp, "grpc.sock")
        port = harness.free_tcp_port()
        d = self.new_daemon(rules, tmpdir=tmp, listen=())  # no --listen of its own
        d.command = lambda: [sa, "-l", "127.0.0.1:%d" % port, "-l", sock, "--fdname=grpc:grpc",
                             "-E", "NOTIFY_SOCKET"] + harness.Daemon.command(d)
        # systemd-socket-activate starts divvyd at the first connection: the client's
        d.start(wait_ready=False)
        tcp = grpcfix.Client("127.0.0.1:%d" % port)
        self.addCleanup(tcp.close)
        d.wait_ready()
        for c in (tcp, self.client(sock)):
            resp = c.should_rate_limit(grpcfix.request("p", [[("u", "activated")]], 1))
            self.assertEqual(grpcfix.code_name(resp.overall_code), "OK")
            self.assertEqual(c.health().status, grpcfix.load().health.HealthCheckResponse.SERVING)
        # one counter behind both passed sockets (the clock is the real one: no resets)
        self.assertEqual(grpcfix.statuses_text(resp, resets=False), ["OK 3/HOUR 1"])


if __name__ == "__main__":
    harness.main()
