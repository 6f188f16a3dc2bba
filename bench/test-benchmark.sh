#!/bin/sh
# SPDX-License-Identifier: MIT
# Smoke test of divvy-benchmark against a real divvyd on a Unix socket and on
# loopback TCP: exit status and the machine-readable RESULT line (reply counts only,
# never timings). Run by `make check`, which exports top_srcdir and top_builddir.
set -u

. "${top_srcdir:-.}/bench/load-test-common.sh"
load_test_init test-benchmark "$top_builddir/bench/divvy-benchmark"
rules=$top_srcdir/bench/divvyd-bench.ini

sock=$tmp/divvyd.sock
"$divvyd" $allow_root -l "unix:$sock" -l "tcp:127.0.0.1:$port" -d "$tmp/db" "$rules" 2>"$tmp/divvyd.log" &
pid=$!

# Ready when one request gets through.
load_test_ready "$load" -q -n 1 -c 1 "unix:$sock"

expect "unix, pipelined: every reply OK true" 0 \
	requests=200 ok_true=200 ok_false=0 err=0 malformed=0 lost=0 connections=4 pipeline=8 -- \
	-q -n 200 -c 4 -P 8 -k 50 "unix:$sock"
expect "tcp, two threads, sequential actors" 0 \
	requests=100 ok_true=100 err=0 threads=2 target=divvy -- \
	-n 100 -c 4 -t 2 -k 100 --sequential -a "tcp:127.0.0.1:$port"
# 3 actors, limit 2, 9 hits in order on 1 connection: 2 allowed and 1 denied per actor.
expect "OK false is counted, and is not an error" 0 \
	requests=9 ok_true=6 ok_false=3 err=0 -- \
	-q -n 9 -c 1 -k 3 --sequential -r 'HIT method=GET path=/bench-limited ip=lim{actor}' "unix:$sock"
# --ipv4: the same 3 actors as dotted quads, distinct and stable: again 2 allowed and 1 denied each.
expect "--ipv4 actors are distinct and stable" 0 \
	requests=9 ok_true=6 ok_false=3 err=0 -- \
	-q -n 9 -c 1 -k 3 --sequential --ipv4 -r 'HIT method=GET path=/bench-limited ip={actor}' "unix:$sock"
expect "--ipv4 at random, pipelined: every reply OK true" 0 \
	requests=400 ok_true=400 ok_false=0 err=0 -- \
	-q -n 400 -c 4 -P 8 -k 1000000 --ipv4 "unix:$sock"
expect "ERR replies make the exit status 1" 1 err=1 -- \
	-q -n 10 -c 1 -r 'FOO {actor}' "unix:$sock"
expect "RESP requests to divvyd fail the run (exit 1)" 1 -- \
	-q -n 5 -c 1 --redis "unix:$sock"
# RESP3 (HELLO 3 first) and MULTI/EXEC (issue #33): the HITs are counted, every reply checked.
expect "--resp3, pipelined: every HIT answered" 0 \
	requests=200 ok_true=200 ok_false=0 err=0 malformed=0 lost=0 resp=3 multi=0 -- \
	-q -n 200 -c 4 -P 8 -k 50 --resp3 -r 'HIT method GET path /bench ip {actor}' "unix:$sock"
# RESP3's HIT map says allowed #f: 2 allowed and 1 denied per actor, as on a line.
expect "--resp3: #f is counted as OK false" 0 \
	requests=9 ok_true=6 ok_false=3 err=0 resp=3 -- \
	-q -n 9 -c 1 -k 3 --sequential --resp3 -r 'HIT method GET path /bench-limited ip r3{actor}' "unix:$sock"
expect "--multi: each EXEC array holds one reply per HIT" 0 \
	requests=200 ok_true=200 ok_false=0 err=0 malformed=0 lost=0 resp=2 multi=1 -- \
	-q -n 200 -c 4 -P 8 -k 50 --multi -r 'HIT method GET path /bench ip {actor}' "unix:$sock"
expect "--multi --resp3, a last transaction shorter than -P" 0 \
	requests=100 ok_true=100 err=0 malformed=0 lost=0 resp=3 multi=1 -- \
	-q -n 100 -c 2 -P 16 --multi --resp3 -r 'HIT method GET path /bench ip {actor}' "unix:$sock"
# A request refused inside EXEC is its element's error: counted, the run fails.
expect "--multi: an error inside EXEC's array is counted" 1 \
	requests=8 ok_true=0 err=8 malformed=0 lost=0 -- \
	-q -n 8 -c 1 -P 4 --multi -r 'TAKE 0 method GET path /bench ip {actor}' "unix:$sock"
# An unknown command aborts the transaction (EXECABORT): the connection is given up.
expect "--multi: EXECABORT fails the run" 1 \
	lost=0 -- \
	-q -n 4 -c 1 -P 2 --multi -r 'NOSUCH {actor}' "unix:$sock"
"$load" -n 4 -c 1 --multi -P 65 "unix:$sock" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && pass "--multi: more than 64 per transaction is a usage error" ||
	fail "--multi: more than 64 per transaction is a usage error"
"$load" -n 1 -c 1 "unix:$tmp/nothing-here" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "cannot connect" "$tmp/err" && pass "no server: exit 1" || fail "no server: exit 1"
"$load" -n 5 -d 1 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && pass "usage error: exit 2" || fail "usage error: exit 2"
"$load" -n 5 --redis -r 'SETEX  k{actor} 60 1' "unix:$sock" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && pass "Redis command with empty words: exit 2" || fail "Redis command with empty words: exit 2"

# --redis with a tab-separated command (a word holding spaces) and array replies, against a
# stand-in for redis-server (python3): it answers *3 of integers to each well-formed
# "EVALSHA sha 1 <key with spaces> 7", an error reply to anything else.
cat >"$tmp/fake-redis.py" <<'EOF'
import socket, sys
path, count = sys.argv[1], int(sys.argv[2])
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(1)
srv.settimeout(10)
conn, _ = srv.accept()
conn.settimeout(10)
f = conn.makefile("rb")
for _ in range(count):
    n = int(f.readline()[1:])
    words = []
    for _ in range(n):
        size = int(f.readline()[1:])
        words.append(f.read(size + 2)[:-2].decode())
    ok = words[:3] == ["EVALSHA", "sha", "1"] and words[3:4] == ["k a b:%s" % words[3][6:]] and words[4:] == ["7"]
    conn.sendall(b"*3\r\n:1\r\n:-1\r\n:86400\r\n" if ok else b"-ERR words %r\r\n" % words)
EOF
python3 "$tmp/fake-redis.py" "$tmp/fake-redis.sock" 12 2>"$tmp/fake.err" &
fake=$!
i=0
while [ ! -S "$tmp/fake-redis.sock" ] && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
expect "--redis: tab-separated words, array replies" 0 \
	requests=12 ok_true=12 err=0 malformed=0 -- \
	-q -n 12 -c 1 -P 4 --redis -r "$(printf 'EVALSHA\tsha\t1\tk a b:{actor}\t7')" "unix:$tmp/fake-redis.sock"
wait "$fake" || cat "$tmp/fake.err" >&2

kill -0 "$pid" 2>/dev/null && pass "divvyd still running" || fail "divvyd still running"
finish
