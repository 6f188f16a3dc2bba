#!/bin/sh
# SPDX-License-Identifier: MIT
# Smoke test of grpc-load against a real divvyd's gRPC listener on loopback TCP: exit status
# and the machine-readable RESULT line (answer counts only, never timings). Run by `make
# check`, which exports top_srcdir and top_builddir.
set -u

. "${top_srcdir:-.}/bench/load-test-common.sh"
load_test_init test-grpc-load "$top_builddir/bench/grpc-load"
rules=$top_srcdir/bench/divvyd-bench-grpc.ini

"$divvyd" $allow_root -l "unix:$tmp/divvyd.sock" --grpc "tcp:127.0.0.1:$port" -d "$tmp/db" "$rules" \
	2>"$tmp/divvyd.log" &
pid=$!
addr=tcp:127.0.0.1:$port

# Ready when one call gets through.
load_test_ready timeout 5 "$load" -q -n 1 -c 1 -m 1 "$addr"

expect "closed loop: every call answered OK" 0 \
	requests=300 ok=300 over_limit=0 err=0 lost=0 connections=3 streams=8 threads=1 -- \
	-q -n 300 -c 3 -m 8 "$addr"
expect "two threads" 0 \
	requests=100 ok=100 err=0 lost=0 threads=2 -- \
	-n 100 -c 4 -m 2 -t 2 "$addr"
expect "open loop (--rate): the calls scheduled are made" 0 \
	requests=60 ok=60 err=0 lost=0 rate=600 -- \
	-q -n 60 -c 3 -m 4 --rate 600 "$addr"
# another key: the rules' default denies (creditLimit 0): OVER_LIMIT, which is an answer, not an error
expect "OVER_LIMIT is counted, and is not an error" 0 \
	requests=20 ok=0 over_limit=20 err=0 -- \
	-q -n 20 -c 1 -m 4 --key other "$addr"
# an empty domain: INVALID_ARGUMENT, a grpc-status other than 0
expect "an error status is counted and fails the run" 1 \
	requests=10 ok=0 over_limit=0 err=10 -- \
	-q -n 10 -c 1 -m 2 --domain '' "$addr"
timeout 10 "$load" -n 1 -c 1 "tcp:127.0.0.1:1" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] && grep -q "cannot connect" "$tmp/err" && pass "no server: exit 1" || fail "no server: exit 1"
"$load" -n 5 -d 1 >"$tmp/out" 2>"$tmp/err"
[ $? -eq 2 ] && pass "usage error: exit 2" || fail "usage error: exit 2"

kill -0 "$pid" 2>/dev/null && pass "divvyd still running" || fail "divvyd still running"
finish
