#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Speaking the divvy protocol directly, standard library only (no client library needed).

    python3 divvy_client.py 127.0.0.1:8321 method=GET path=/status
    python3 divvy_client.py /run/divvyd/divvyd.sock method=GET path=/status
"""

import socket
import sys


class DivvyError(Exception):
    pass


def quote(s):
    """A key or value on the wire: quoted when it has a space, '=', or is empty."""
    if '"' in s or any(c < " " and c != "\t" for c in s):
        raise ValueError("the protocol cannot carry %r" % s)
    if s == "" or any(c in " \t=" or c > "\x7f" for c in s):
        return '"%s"' % s
    return s


class Divvy:
    def __init__(self, address, timeout=5.0):
        if address.startswith("/") or address.startswith("unix:"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(address[5:] if address.startswith("unix:") else address)
        else:
            host, _, port = address.removeprefix("tcp:").rpartition(":")
            self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        self.rfile = self.sock.makefile("rb")

    def hit(self, **operation):
        """Returns (allowed, credit, reset_seconds); raises DivvyError on an ERR reply."""
        line = "HIT " + " ".join("%s=%s" % (quote(k), quote(v)) for k, v in operation.items())
        self.sock.sendall(line.encode() + b"\n")
        reply = self.rfile.readline().decode().split()
        if not reply:
            raise DivvyError("connection closed")
        if reply[0] == "ERR":
            raise DivvyError(" ".join(reply[1:]))
        return reply[1] == "true", int(reply[2]), int(reply[3])

    def close(self):
        self.rfile.close()
        self.sock.close()


if __name__ == "__main__":
    d = Divvy(sys.argv[1])
    allowed, credit, reset = d.hit(**dict(a.split("=", 1) for a in sys.argv[2:]))
    d.close()
    print("allowed" if allowed else "denied", credit, reset)
    sys.exit(0 if allowed else 1)
