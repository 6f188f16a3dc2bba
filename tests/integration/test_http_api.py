#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The HTTP decision API (docs/http-api.md): --http-api listeners, apart from /metrics.

Python's http.client and urllib, and curl as a user would type it: 200 then 429 with the
RateLimit and RateLimit-Policy fields of draft-ietf-httpapi-ratelimit-headers-11 and Retry-After,
peek, charge, refund and reset on admin listeners only, explain, envoyproxy/ratelimit's /json,
every bad request refused with its status and a JSON reason and nothing charged (the credit left
is read back afterwards), 16 requests on one keep-alive connection, the API absent from the
metrics port and /metrics absent from the API's, and a socket passed by systemd named http-api.
"""

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

CONFIG = """\
[path=/fw user=*]
creditLimit = 3
resetSeconds = 3600
actorField = user
label = fw

[path=/pm user=*]
creditLimit = 100
resetSeconds = 60
actorField = user
label = per-minute

[path=/canary/* user=*]
creditLimit = 1
resetSeconds = 3600
actorField = user
matchPolicy = canary
label = canary

[user=* path=/canary/*]
creditLimit = 10
resetSeconds = 3600
actorField = user
label = canaried

[domain=edge remote_address=*]
creditLimit = 2
resetSeconds = 60
actorField = remote_address
label = edge-per-ip

[domain=edge user=*]
creditLimit = 3
resetSeconds = 60
actorField = user
label = edge-per-user

[domain=edge]
creditLimit = 5
resetSeconds = 0
label = edge-open

[default]
creditLimit = 0
resetSeconds = 0
"""

# RFC 9651: an sf-list of one sf-item, a string with integer parameters.
SF_ITEM = re.compile(r'^"((?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"((?:;[a-z*][a-z0-9_.*-]*=\d{1,15})+)$')


def sf_item(value):
    m = SF_ITEM.match(value)
    assert m, "not an sf-list of one item: %r" % value
    params = dict(p.split("=") for p in m.group(2)[1:].split(";"))
    return m.group(1), {k: int(v) for k, v in params.items()}


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class HttpApiTest(harness.DaemonTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = harness.make_tmpdir()
        cls.config = os.path.join(cls.tmp, "rules.ini")
        with open(cls.config, "w") as f:
            f.write(CONFIG)
        cls.api_port = harness.free_tcp_port()
        cls.metrics_port = harness.free_tcp_port()
        cls.admin_path = os.path.join(cls.tmp, "api-admin.sock")
        cls.d = cls.start_shared_daemon(cls.config, args=[
            "--http-api=tcp:127.0.0.1:%d" % cls.api_port,
            "--http-api=admin:unix:" + cls.admin_path,
            "--http-port=%d" % cls.metrics_port])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def conn(self, admin=False):
        if admin:
            return UnixHTTPConnection(self.admin_path, harness.IO_TIMEOUT)
        return http.client.HTTPConnection("127.0.0.1", self.api_port, timeout=harness.IO_TIMEOUT)

    def post(self, path, body, admin=False, conn=None, content_type="application/json", method="POST"):
        """(status, headers, parsed JSON body)."""
        c = conn or self.conn(admin)
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        headers = {"Content-Type": content_type} if content_type else {}
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        raw = r.read()
        if conn is None:
            c.close()
        self.assertEqual(r.getheader("Content-Type"), "application/json")
        return r.status, r.headers, json.loads(raw)

    def credit(self, pairs):
        """What a PEEK of 0 reads: the credit left, nothing charged."""
        status, _, body = self.post("/v1/peek", {"pairs": pairs, "count": 0})
        self.assertEqual(status, 200, body)
        return body["credit"]

    def test_take_until_denied_with_headers(self):
        pairs = {"path": "/fw", "user": "take"}
        for left in (2, 1, 0):
            status, h, body = self.post("/v1/take", {"pairs": pairs})
            self.assertEqual(status, 200)
            self.assertEqual(body["allowed"], True)
            self.assertEqual(body["credit"], left)
            self.assertEqual(body["rule"], "fw")
            self.assertEqual(sf_item(h["RateLimit-Policy"]), ("fw", {"q": 3, "w": 3600}))
            name, p = sf_item(h["RateLimit"])
            self.assertEqual((name, p["r"]), ("fw", left))
            self.assertTrue(0 < p["t"] <= 3600, p)
            self.assertIsNone(h.get("Retry-After"))
        status, h, body = self.post("/v1/take", {"pairs": pairs})
        self.assertEqual(status, 429)
        self.assertEqual(body["allowed"], False)
        self.assertEqual(sf_item(h["RateLimit"])[1]["r"], 0)
        retry = int(h["Retry-After"])
        self.assertEqual(retry, body["retry"])
        self.assertTrue(1 <= retry <= 3600)
        self.assertEqual(self.credit(pairs), 0)

    def test_count_charge_and_peek(self):
        pairs = {"path": "/pm", "user": "count"}
        status, _, body = self.post("/v1/take", {"pairs": pairs, "count": 40})
        self.assertEqual((status, body["credit"]), (200, 60))
        status, _, body = self.post("/v1/peek", {"pairs": pairs, "count": 61})
        self.assertEqual((status, body["allowed"]), (429, False))
        status, _, body = self.post("/v1/charge", {"pairs": pairs, "count": 70})
        self.assertEqual((status, body["allowed"], body["credit"]), (429, False, 0))  # charged anyway
        self.assertEqual(self.credit(pairs), 0)

    def test_refund_and_reset_on_admin_only(self):
        pairs = {"path": "/pm", "user": "refund"}
        self.post("/v1/take", {"pairs": pairs, "count": 10})
        status, h, body = self.post("/v1/refund", {"pairs": pairs, "count": 4})
        self.assertEqual(status, 403)
        self.assertEqual(body["error"], "forbidden")
        self.assertEqual(self.credit(pairs), 90)  # nothing refunded
        status, _, body = self.post("/v1/reset", {"pairs": pairs})
        self.assertEqual(status, 403)
        status, _, body = self.post("/v1/refund", {"pairs": pairs, "count": 4}, admin=True)
        self.assertEqual((status, body["allowed"], body["credit"]), (200, True, 94))
        status, _, body = self.post("/v1/reset", {"pairs": pairs}, admin=True)
        self.assertEqual((status, body), (200, {"reset": 1}))
        self.assertEqual(self.credit(pairs), 100)

    def test_explain(self):
        status, h, body = self.post("/v1/explain", {"pairs": {"path": "/canary/x", "user": "ex\"pl"}})
        self.assertEqual(status, 200)
        self.assertEqual(body, {"rule": "canaried", "index": 3, "policy": "stop", "actor": "ex\"pl",
                                "algorithm": "fixed-window", "canaries": ["canary"], "continue": []})
        self.assertIsNone(h.get("RateLimit"))

    def test_envoy_json(self):
        req = {"domain": "edge", "descriptors": [
            {"entries": [{"key": "remote_address", "value": "10.1.1.1"}]},
            {"entries": [{"key": "other", "value": "x"}]}]}
        status, _, body = self.post("/json", req, content_type=None)  # curl's -d sends a form type
        self.assertEqual(status, 200)
        self.assertEqual(body, {"overallCode": "OK", "statuses": [
            {"code": "OK", "currentLimit": {"requestsPerUnit": 2, "unit": "MINUTE", "name": "edge-per-ip"},
             "limitRemaining": 1, "durationUntilReset": "60s"},
            {"code": "OK"}]})  # a rule that always allows: no limit, as gRPC answers it
        self.post("/json", req)
        status, _, body = self.post("/json", req)
        self.assertEqual(status, 429)
        self.assertEqual(body["overallCode"], "OVER_LIMIT")
        self.assertEqual(body["statuses"][0]["code"], "OVER_LIMIT")
        self.assertNotIn("limitRemaining", body["statuses"][0])
        self.assertRegex(body["statuses"][0]["durationUntilReset"], r"^[1-9][0-9]*s$")
        # hits_addend 0: a peek, nothing charged
        peek = {"domain": "edge", "descriptors": [
            {"entries": [{"key": "remote_address", "value": "10.1.1.2"}], "hits_addend": 0}]}
        for _ in range(3):
            status, _, body = self.post("/json", peek)
            self.assertEqual(body["statuses"][0]["limitRemaining"], 2)

    def test_envoy_json_all_or_nothing(self):
        # two descriptors of one request are decided as gRPC decides them: nothing is charged
        # unless both allow; the one not charged reports what it has
        ip = {"entries": [{"key": "remote_address", "value": "10.2.2.%d" % (os.getpid() % 250)}]}
        user = {"entries": [{"key": "user", "value": "aon-%d" % os.getpid()}]}

        def remaining(body):
            return [(s["code"], s.get("limitRemaining", 0)) for s in body["statuses"]]

        for want in ([("OK", 1), ("OK", 2)], [("OK", 0), ("OK", 1)]):
            status, _, body = self.post("/json", {"domain": "edge", "descriptors": [ip, user]})
            self.assertEqual((status, remaining(body)), (200, want))
        status, _, body = self.post("/json", {"domain": "edge", "descriptors": [user, ip]})
        self.assertEqual(status, 429)
        self.assertEqual(body["overallCode"], "OVER_LIMIT")
        self.assertEqual(remaining(body), [("OK", 1), ("OVER_LIMIT", 0)])
        self.assertEqual(body["statuses"][0]["currentLimit"],
                         {"requestsPerUnit": 3, "unit": "MINUTE", "name": "edge-per-user"})
        # the user was not charged: one credit is left, read by a peek (hits_addend 0)
        peek = dict(user, hits_addend=0)
        status, _, body = self.post("/json", {"domain": "edge", "descriptors": [peek]})
        self.assertEqual(remaining(body), [("OK", 1)])

    def responses(self):
        """divvyd_http_api_responses_total by status, from the metrics port."""
        samples = harness.prometheus_samples(harness.http_get(self.metrics_port)[2])
        pre = 'divvyd_http_api_responses_total{status="'
        return {k[len(pre):-2]: v for k, v in samples.items() if k.startswith(pre)}

    def test_responses_counted(self):
        # every answer in divvyd_http_api_responses_total, also those refused before the
        # engine (404, 405, 415, 413); the engine's refusals are in divvy_errors_total too
        before = self.responses()
        self.assertIn("200", before)
        pairs = {"path": "/pm", "user": "count-%d" % os.getpid()}
        for path, body, kw, want in (
                ("/v1/take", {"pairs": pairs}, {}, 200),
                ("/v1/nope", {"pairs": pairs}, {}, 404),
                ("/v1/take", {"pairs": pairs}, {"method": "PUT"}, 405),
                ("/v1/take", {"pairs": pairs}, {"content_type": "text/plain"}, 415),
                ("/v1/take", {"pairs": dict(pairs, pad="x" * 20000)}, {}, 413),
                ("/v1/take", "{", {}, 400),
                ("/v1/refund", {"pairs": pairs}, {}, 403)):
            status, _, _ = self.post(path, body, **kw)
            self.assertEqual(status, want, path)
        after = self.responses()
        delta = {k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)}
        self.assertEqual(delta, {"200": 1, "404": 1, "405": 1, "415": 1, "413": 1, "400": 1, "403": 1})

    def test_bad_requests_charge_nothing(self):
        pairs = {"path": "/pm", "user": "bad"}
        good = json.dumps({"pairs": pairs, "count": 1})
        cases = [
            ("/v1/take", "{", 400),
            ("/v1/take", good[:-1], 400),
            ("/v1/take", json.dumps({"pairs": pairs, "count": 1, "extra": 1}), 400),
            ("/v1/take", json.dumps({"pairs": pairs, "count": "1"}), 400),
            ("/v1/take", json.dumps({"pairs": pairs, "count": -1}), 400),
            ("/v1/take", json.dumps({"pairs": pairs, "count": 1.5}), 400),
            ("/v1/take", json.dumps({"pairs": dict(pairs, n=1), "count": 1}), 400),
            ("/v1/take", '{"pairs": {"path": "/pm", "user": "bad", "user": "bad"}}', 400),
            ("/v1/take", json.dumps({"pairs": pairs, "count": 2 ** 53}), 400),
            ("/v1/take", json.dumps([pairs]), 400),
            ("/v1/take", json.dumps({"pairs": pairs}) + " {}", 400),
            ("/v1/take", b'{"pairs": {"path": "/pm", "user": "b\xffd"}}', 400),
            ("/v1/take", json.dumps({"pairs": dict(pairs, pad="x" * 20000)}), 413),
            ("/v1/nope", good, 404),
            ("/json", json.dumps({"domain": "edge", "descriptors": [
                {"entries": [{"key": "remote_address", "value": "1"}], "limit": {"requests_per_unit": 1}}]}), 400),
        ]
        for path, body, want in cases:
            status, _, reply = self.post(path, body)
            self.assertEqual(status, want, (path, body[:80], reply))
            self.assertIn("error", reply)
            self.assertIn("reason", reply)
        # /json: one bad descriptor (the domain twice, a refund off an admin listener) and
        # nothing is charged for the good ones beside it
        ip = {"key": "remote_address", "value": "10.9.9.9"}
        for bad, want in (({"entries": [{"key": "domain", "value": "x"}]}, 400),
                          ({"entries": [ip], "is_negative_hits": True}, 403)):
            status, _, reply = self.post("/json", {"domain": "edge", "descriptors": [{"entries": [ip]}, bad]})
            self.assertEqual(status, want, reply)
        status, _, reply = self.post("/json", {"domain": "edge", "descriptors": [
            {"entries": [ip], "hits_addend": 0}]})
        self.assertEqual(reply["statuses"][0]["limitRemaining"], 2)
        status, h, reply = self.post("/v1/take", good, method="GET")
        self.assertEqual((status, h["Allow"]), (405, "POST"))
        status, _, reply = self.post("/v1/take", good, content_type="text/plain")
        self.assertEqual((status, reply["error"]), (415, "unsupported-media-type"))
        self.assertEqual(self.credit(pairs), 100)

    def test_keep_alive(self):
        c = self.conn()
        pairs = {"path": "/pm", "user": "keepalive"}
        local = None
        for i in range(16):
            status, h, body = self.post("/v1/take", {"pairs": pairs}, conn=c)
            self.assertEqual((status, body["credit"]), (200, 99 - i))
            self.assertNotEqual(h.get("Connection"), "close")
            # the same connection all along (http.client would open a new one silently)
            self.assertIsNotNone(c.sock)
            local = local or c.sock.getsockname()
            self.assertEqual(c.sock.getsockname(), local)
        c.close()

    def test_ports_apart(self):
        status, _, body = harness.http_get(self.metrics_port, "/metrics")
        self.assertEqual(status, 200)
        c = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=harness.IO_TIMEOUT)
        c.request("POST", "/v1/take", body="{}", headers={"Content-Type": "application/json"})
        self.assertEqual(c.getresponse().status, 405)  # the metrics endpoint knows no POST
        c.close()
        c = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=harness.IO_TIMEOUT)
        c.request("GET", "/v1/take")
        self.assertEqual(c.getresponse().status, 404)
        c.close()
        c = self.conn()
        c.request("GET", "/metrics")
        r = c.getresponse()
        self.assertEqual(r.status, 404)
        self.assertNotIn(b"divvyd_", r.read())
        c.close()

    def test_slow_clients_bounded(self):
        # 70 connections that never finish their request: beyond 60 each new one closes the one
        # waiting longest, so a request still gets in; and each is closed by the 5 s deadline.
        slow = []
        try:
            for _ in range(70):
                s = socket.create_connection(("127.0.0.1", self.api_port), timeout=harness.IO_TIMEOUT)
                s.sendall(b"POST /v1/take HTTP/1.1\r\nHost: x\r\n")
                slow.append(s)
            status, _, body = self.post("/v1/take", {"pairs": {"path": "/pm", "user": "slow"}})
            self.assertEqual((status, body["credit"]), (200, 99))
            # the oldest was closed to make room; the last one by the deadline (bounded wait)
            slow[0].settimeout(harness.IO_TIMEOUT)
            self.assertEqual(slow[0].recv(1), b"")
            slow[-1].settimeout(5 + 2 * harness.IO_TIMEOUT)
            self.assertEqual(slow[-1].recv(1), b"")
        finally:
            for s in slow:
                s.close()

    def test_curl(self):
        curl = shutil.which("curl")
        if not curl:
            self.skipTest("curl not installed")
        url = "http://127.0.0.1:%d/v1/take" % self.api_port
        out = subprocess.run(
            [curl, "-s", "-i", "-H", "Content-Type: application/json", "-d",
             '{"pairs": {"path": "/fw", "user": "curl"}, "count": 3}', url],
            capture_output=True, timeout=harness.IO_TIMEOUT, check=True).stdout.decode()
        self.assertRegex(out, r"^HTTP/1.1 200 ")
        self.assertIn('\r\nRateLimit: "fw";r=0;t=', out)
        self.assertIn('\r\nRateLimit-Policy: "fw";q=3;w=3600\r\n', out)
        out = subprocess.run(
            [curl, "-s", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Content-Type: application/json",
             "-d", '{"pairs": {"path": "/fw", "user": "curl"}}', url],
            capture_output=True, timeout=harness.IO_TIMEOUT, check=True).stdout.decode()
        self.assertEqual(out, "429")
        out = subprocess.run(
            [curl, "-s", "--unix-socket", self.admin_path, "-H", "Content-Type: application/json", "-d",
             '{"pairs": {"path": "/fw", "user": "curl"}, "count": 1}', "http://localhost/v1/refund"],
            capture_output=True, timeout=harness.IO_TIMEOUT, check=True).stdout.decode()
        self.assertEqual(json.loads(out)["credit"], 1)


def doc_blocks(path):
    """The indented code blocks of a Markdown file, in order, as lists of lines."""
    blocks, cur = [], None
    with open(path) as f:
        for line in f.read().split("\n"):
            if line.startswith("    "):
                cur = cur if cur is not None else []
                cur.append(line[4:])
            elif line.strip() == "" and cur is not None:
                cur.append("")
            elif cur is not None:
                blocks.append(cur)
                cur = None
    if cur is not None:
        blocks.append(cur)
    return [[l for l in b] for b in blocks]


# Values that depend on the second a request lands in: compared as numbers 1..60.
TIMED = re.compile(r"((?:t=|Retry-After: |\"reset\":|\"retry\":|\"durationUntilReset\":\")\s*)([0-9]+)")


class HttpApiDocTest(harness.DaemonTestCase):
    def test_docs_examples_run_as_written(self):
        """docs/http-api.md: its rules, its daemon command and every curl command with the reply
        it shows (the port and the admin socket's path replaced by the test's)."""
        curl = shutil.which("curl")
        if not curl:
            self.skipTest("curl not installed")
        doc = os.path.join(harness.top_srcdir(), "docs", "http-api.md")
        blocks = doc_blocks(doc)
        rules = next(b for b in blocks if b[0].startswith("[path=/search"))
        tmp = harness.make_tmpdir()
        self.addCleanup(shutil.rmtree, tmp, True)
        config = os.path.join(tmp, "rules.ini")
        with open(config, "w") as f:
            f.write("\n".join(rules).strip() + "\n")
        command = next(" ".join(l.strip().rstrip("\\") for l in b if l.strip())
                       for b in blocks if b[0].startswith("divvyd "))
        port, admin = harness.free_tcp_port(), os.path.join(tmp, "admin.sock")
        swap = lambda t: t.replace("127.0.0.1:8080", "127.0.0.1:%d" % port).replace(
            "/tmp/divvyd-api-admin.sock", admin)
        words = swap(command).split()[1:-1]  # without divvyd and rules.ini
        at = words.index("--db")
        args = words[:at] + words[at + 2:]  # the harness gives the daemon its own --db
        self.assertEqual(args, ["--http-api=tcp:127.0.0.1:%d" % port, "--http-api=admin:unix:" + admin])
        self.start_daemon(config, args=args, listen=("unix",))
        ran = 0
        # a block may hold several commands, each with its reply, a blank line apart
        pieces = []
        for b in blocks:
            cur = []
            for line in b + [""]:
                if line.startswith("curl ") and any(l.strip() for l in cur):
                    pieces.append(cur)
                    cur = []
                cur.append(line)
            pieces.append(cur)
        blocks = [p for p in pieces if any(l.strip() for l in p)]
        for i, b in enumerate(blocks):
            if not b[0].startswith("curl "):
                continue
            # the command up to a blank line, then the reply shown (or in the next block)
            end = b.index("") if "" in b else len(b)
            cmd = swap(" ".join(l.strip().rstrip("\\") for l in b[:end]))
            out = subprocess.run(["sh", "-c", cmd], capture_output=True, timeout=harness.IO_TIMEOUT,
                                 check=True).stdout.decode().replace("\r\n", "\n")
            rest = b[end + 1:]
            shown = rest[:rest.index("")] if "" in rest else rest
            if shown and shown[0].startswith("curl "):
                shown = []
            if not shown and i + 1 < len(blocks) and not blocks[i + 1][0].startswith("curl "):
                shown = [l for l in blocks[i + 1] if l.strip()]
            if shown and shown[0].startswith("HTTP/1.1"):
                got = out.split("\n")
                for line in shown:  # each line shown is in the reply (Date & co. are left out)
                    self.assertTrue(any(TIMED.sub(r"\1N", line) == TIMED.sub(r"\1N", g) for g in got),
                                    (cmd, line, out))
            elif shown and shown[0].startswith("{"):
                self.assertEqual(TIMED.sub(r"\1N", out.strip()), TIMED.sub(r"\1N", shown[0]), cmd)
                for m in TIMED.finditer(out):
                    self.assertTrue(1 <= int(m.group(2)) <= 60 or m.group(1).startswith('"retry"'), out)
            ran += 1
        self.assertGreaterEqual(ran, 7)


class HttpApiActivationTest(harness.DaemonTestCase):
    def test_socket_named_http_api(self):
        sa = harness.socket_activate_path()
        if not sa:
            self.skipTest("systemd-socket-activate not installed")
        tmp = harness.make_tmpdir()
        self.addCleanup(shutil.rmtree, tmp, True)
        config = os.path.join(tmp, "rules.ini")
        with open(config, "w") as f:
            f.write(CONFIG)
        line_port, api_port = harness.free_tcp_port(), harness.free_tcp_port()
        d = harness.Daemon(config, listen=(), tmpdir=tmp, notify=False)
        cmd = [sa, "-l", "127.0.0.1:%d" % line_port, "-l", "127.0.0.1:%d" % api_port,
               "--fdname=tcp:http-api"] + d.command()
        log = open(os.path.join(tmp, "log"), "wb")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            # systemd-socket-activate listens first (bounded wait), then the first connection
            # starts divvyd
            for _ in range(int(100 * harness.TIMEOUT_SCALE)):
                try:
                    socket.create_connection(("127.0.0.1", line_port), timeout=harness.IO_TIMEOUT).close()
                    break
                except ConnectionRefusedError:
                    time.sleep(0.05)
            c = http.client.HTTPConnection("127.0.0.1", api_port, timeout=harness.IO_TIMEOUT)
            c.request("POST", "/v1/take", body=json.dumps({"pairs": {"path": "/fw", "user": "sa"}}),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            self.assertEqual(r.status, 200)
            self.assertEqual(json.loads(r.read())["credit"], 2)
            c.close()
        finally:
            proc.terminate()
            proc.wait(timeout=harness.STOP_TIMEOUT)
            log.close()
        with open(os.path.join(tmp, "log")) as f:
            self.assertIn("Serving the HTTP API on fd 4 (http-api) (socket activation)", f.read())


if __name__ == "__main__":
    harness.main()
