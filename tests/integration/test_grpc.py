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

Run one test:  tests/integration/test_grpc.py Grpc.test_ok_then_over_limit
"""

import importlib.util
import os
import shutil
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


if __name__ == "__main__":
    harness.main()
