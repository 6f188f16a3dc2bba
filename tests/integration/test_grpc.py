#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Envoy's rate limit service over gRPC (issue #34), driven with grpcio (Debian's python3-grpcio)
and the messages of proto/, compiled by grpc_tools.protoc into a temporary directory when the
tests start; against tests/data/grpc.ini on a --grpc listener (TCP) and an admin one (Unix).

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

Run one test:  tests/integration/test_grpc.py Grpc.test_ok_then_over_limit
"""

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile

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

RLS = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


def compile_protos():
    """The Python modules of proto/'s messages, generated into a temporary directory."""
    from grpc_tools import protoc

    proto_dir = os.path.join(harness.top_srcdir(), "proto")
    out = tempfile.mkdtemp(prefix="divvyd-grpc-pb-")
    well_known = os.path.join(os.path.dirname(protoc.__file__), "_proto")
    files = []
    for sub in ("envoy", "grpc"):
        for root, _, names in os.walk(os.path.join(proto_dir, sub)):
            files += [os.path.relpath(os.path.join(root, n), proto_dir) for n in names if n.endswith(".proto")]
    # grpc_tools' well-known types first: the modules import the installed google.protobuf
    rc = protoc.main(["protoc", "-I" + well_known, "-I" + proto_dir, "--python_out=" + out] + sorted(files))
    if rc != 0:
        raise harness.HarnessError("grpc_tools.protoc failed on proto/ (%d)" % rc)
    sys.path.insert(0, out)
    from envoy.service.ratelimit.v3 import rls_pb2
    # grpc/health/v1/health_pb2.py: its package would shadow grpcio's "grpc"; loaded by path
    spec = importlib.util.spec_from_file_location("divvyd_health_pb2",
                                                  os.path.join(out, "grpc", "health", "v1", "health_pb2.py"))
    health_pb2 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(health_pb2)
    return out, rls_pb2, health_pb2


class Grpc(harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        if grpc is None:
            raise harness.HarnessError("python3-grpcio is missing (tools/bootstrap installs it)")
        cls.pb_dir, cls.pb, cls.health = compile_protos()
        cls.addClassCleanup(shutil.rmtree, cls.pb_dir, True)
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
        cls.pb_dir, cls.pb, cls.health = compile_protos()
        cls.addClassCleanup(shutil.rmtree, cls.pb_dir, True)

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


if __name__ == "__main__":
    harness.main()
