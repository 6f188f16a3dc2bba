# SPDX-License-Identifier: MIT
"""A real gRPC client for divvyd's ShouldRateLimit (issue #34): Debian's python3-grpcio, with
the messages generated at test time from our proto/ by python3-grpc-tools' protoc into a
temporary directory (removed at exit), as proto/README.md describes.

    import grpcfix
    pb = grpcfix.load()                      # or harness.skip_all(grpcfix.missing())
    with grpcfix.Client("unix:" + path) as c:
        resp = c.should_rate_limit(grpcfix.request("basic", [[("key1", "foo")]]))
        grpcfix.statuses_text(resp)          # ["OK 50/SECOND 49 1"], as the data tables write it

missing() names what is not installed. When the python3 running the tests is not Debian's (a
pyenv one), grpcio and grpc_tools are looked for in Debian's dist-packages as well.
"""

import atexit
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import types

import harness

try:
    import grpc
except ImportError:  # a python3 of its own (pyenv): use Debian's python3-grpcio
    if "/usr/lib/python3/dist-packages" not in sys.path:
        sys.path.append("/usr/lib/python3/dist-packages")
    try:
        import grpc
    except ImportError:
        grpc = None

SERVICE = "/envoy.service.ratelimit.v3.RateLimitService/"
HEALTH = "/grpc.health.v1.Health/"
PROTOC_TIMEOUT = 60 * harness.TIMEOUT_SCALE
RPC_TIMEOUT = harness.IO_TIMEOUT  # one call's deadline (sent as grpc-timeout)


def proto_dir():
    return os.path.join(harness.top_srcdir(), "proto")


def missing():
    """Why the gRPC tests cannot run here, or None."""
    if grpc is None:
        return "python3-grpcio not installed (Debian: apt-get install python3-grpcio)"
    if importlib.util.find_spec("grpc_tools") is None:
        return "python3-grpc-tools not installed (Debian: apt-get install python3-grpc-tools)"
    if not os.path.isdir(proto_dir()):
        return "no proto/ directory at %s" % proto_dir()
    return None


_modules = None


def _load_file(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load():
    """The generated message modules, once per process: a namespace with rls (RateLimitRequest,
    RateLimitResponse), desc (RateLimitDescriptor) and health (HealthCheckRequest, ...)."""
    global _modules
    if _modules is not None:
        return _modules
    import grpc_tools
    out = tempfile.mkdtemp(prefix="divvyd-grpc-")
    atexit.register(shutil.rmtree, out, True)
    protos = []
    for sub in ("envoy", "grpc"):
        for root, _, files in os.walk(os.path.join(proto_dir(), sub)):
            protos += [os.path.relpath(os.path.join(root, f), proto_dir()) for f in files
                       if f.endswith(".proto")]
    wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    p = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", wkt, "-I", proto_dir(),
                        "--python_out=" + out] + sorted(protos), capture_output=True, text=True,
                       timeout=PROTOC_TIMEOUT,
                       env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(grpc_tools.__file__))))
    if p.returncode != 0:
        raise harness.HarnessError("grpc_tools.protoc failed: %s" % p.stderr)
    sys.path.insert(0, out)
    try:
        from envoy.service.ratelimit.v3 import rls_pb2
        from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
    finally:
        sys.path.remove(out)
    # grpc.health.v1 would be imported as grpcio's own package: load the file by path.
    health = _load_file("divvyd_health_pb2", os.path.join(out, "grpc", "health", "v1", "health_pb2.py"))
    _modules = types.SimpleNamespace(rls=rls_pb2, desc=ratelimit_pb2, health=health)
    return _modules


def descriptor(entries, hits_addend=None, negative=False):
    """A RateLimitDescriptor: entries [(key, value)], the descriptor's own hits_addend (None:
    unset, the request's applies) and is_negative_hits."""
    d = load().desc.RateLimitDescriptor()
    for k, v in entries:
        e = d.entries.add()
        e.key, e.value = k, v
    if hits_addend is not None:
        d.hits_addend.value = hits_addend
    if negative:
        d.is_negative_hits = True
    return d


def request(domain, descriptors, hits_addend=0):
    """A RateLimitRequest; descriptors: each a list of (key, value) or a RateLimitDescriptor."""
    r = load().rls.RateLimitRequest(domain=domain, hits_addend=hits_addend)
    for d in descriptors:
        r.descriptors.append(d if not isinstance(d, (list, tuple)) else descriptor(d))
    return r


def parse_descriptors(text):
    """The tables' descriptors: ";" between descriptors, "," between key=value entries."""
    return [[tuple(e.split("=", 1)) for e in d.split(",")] for d in text.split(";")]


def code_name(code):
    return load().rls.RateLimitResponse.Code.Name(code)


def status_text(st, resets=True):
    """One DescriptorStatus as the tables write it: "OK" when no limit applies (no current_limit,
    no duration_until_reset, limit_remaining 0), else "CODE REQUESTS/UNIT REMAINING RESET", the
    reset in whole seconds (with "+<nanos>ns" appended when nanos is not 0; left out when resets
    is False)."""
    rl = load().rls.RateLimitResponse
    if not st.HasField("current_limit") and not st.HasField("duration_until_reset") and \
            st.limit_remaining == 0:
        return code_name(st.code)
    out = "%s %d/%s %d" % (code_name(st.code), st.current_limit.requests_per_unit,
                           rl.RateLimit.Unit.Name(st.current_limit.unit), st.limit_remaining)
    if not resets:
        return out
    if st.HasField("duration_until_reset"):
        out += " %d" % st.duration_until_reset.seconds
        if st.duration_until_reset.nanos:
            out += "+%dns" % st.duration_until_reset.nanos
    else:
        out += " -"
    return out


def statuses_text(resp, resets=True):
    return [status_text(s, resets) for s in resp.statuses]


class Client:
    """One channel (one HTTP/2 connection) to target ("unix:PATH" or "HOST:PORT")."""

    def __init__(self, target, options=()):
        pb = load()
        # No proxy from the environment: the daemon is on loopback or a Unix socket.
        self.channel = grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)] +
                                             list(options))
        self.should_rate_limit_call = self.channel.unary_unary(
            SERVICE + "ShouldRateLimit", request_serializer=pb.rls.RateLimitRequest.SerializeToString,
            response_deserializer=pb.rls.RateLimitResponse.FromString)
        self.health_call = self.channel.unary_unary(
            HEALTH + "Check", request_serializer=pb.health.HealthCheckRequest.SerializeToString,
            response_deserializer=pb.health.HealthCheckResponse.FromString)
        grpc.channel_ready_future(self.channel).result(timeout=harness.START_TIMEOUT)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.channel.close()

    def should_rate_limit(self, req, timeout=None):
        return self.should_rate_limit_call(req, timeout=timeout or RPC_TIMEOUT)

    def raw(self, method, payload, timeout=None):
        """Calls METHOD with payload's bytes as the message (no serialisation): malformed
        messages. Returns the response's bytes; raises grpc.RpcError."""
        call = self.channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        return call(payload, timeout=timeout or RPC_TIMEOUT)

    def health(self, service=""):
        return self.health_call(load().health.HealthCheckRequest(service=service),
                                timeout=RPC_TIMEOUT)
