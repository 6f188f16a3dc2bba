#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A scripted divvy server for the divvy command's tests: listens on a Unix socket and answers
each request line from a script, logging every line it receives.

    fake-server.py SOCKET SCRIPT LOG

SCRIPT: one step per line, "REQUEST<TAB>REPLY"; REPLY may hold "\\n" for several lines, and a
reply with an ERR line closes the connection after it (as divvyd and divvy do). A request
that differs from the script is answered with "ERR unknown \\"script mismatch\\"" and logged
as "MISMATCH ...". Every accepted connection is logged as "CONNECT". Exits when the script is
done and the client closed, or after 60 s without anything to do (bounded)."""

import os
import socket
import sys

IDLE_SECONDS = 60


def main():
    path, script_path, log_path = sys.argv[1:4]
    with open(script_path, encoding="utf-8") as f:
        steps = [line.rstrip("\n").split("\t", 1) for line in f if line.strip()]
    log = open(log_path, "w", encoding="utf-8", buffering=1)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    srv.settimeout(IDLE_SECONDS)
    i = 0
    while True:
        try:
            conn, _ = srv.accept()
        except socket.timeout:
            break
        log.write("CONNECT\n")
        conn.settimeout(IDLE_SECONDS)
        buf = b""
        try:
            while True:
                while b"\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        raise EOFError
                    buf += data
                line, buf = buf.split(b"\n", 1)
                text = line.decode("utf-8", "replace")
                if i >= len(steps) or steps[i][0] != text:
                    log.write("MISMATCH %s\n" % text)
                    conn.sendall(b'ERR unknown "script mismatch"\n')
                    break
                log.write("%s\n" % text)
                reply = steps[i][1].replace("\\n", "\n") + "\n"
                i += 1
                conn.sendall(reply.encode("utf-8"))
                if reply.startswith("ERR") or "\nERR" in reply:
                    break
        except (EOFError, socket.timeout, ConnectionError):
            pass
        conn.close()
        if i >= len(steps):
            break
    srv.close()
    os.unlink(path)


if __name__ == "__main__":
    main()
