#!/bin/sh
# SPDX-License-Identifier: MIT
# Envoy's ShouldRateLimit over gRPC (issue #34) beside the line protocol's HIT, in one run:
#
#   bench/run-bench-grpc.sh [--runs N] [--duration SEC] [--divvyd PATH] [--benchmark PATH]
#                           [--load PATH]
#
# One divvyd (bench/divvyd-bench-grpc.ini), its line protocol and its gRPC listener on
# 127.0.0.1, the same rule and the same counter behind both:
#   - line HIT   divvy-benchmark -c 16 -P 16: HIT domain=bench ip=0
#   - gRPC peak  bench/grpc-load -c 16 -m 16 (16 HTTP/2 connections x 16 concurrent streams,
#                closed loop): the ShouldRateLimit of domain "bench" with one descriptor
#                (ip, 0), gRPC-framed; every answer checked (grpc-status 0, overall_code OK)
#   - gRPC p99   grpc-load --rate at half the peak's rate (open loop: calls due on a fixed
#                schedule spread over the 16 connections, latency from when each was due,
#                until the stream's end, trailers included)
#   - gRPC 1x1   one connection, one call at a time: the latency of a call alone
#   - h2load     the peak again with h2load -c 16 -m 16, a cross-check of the client (when
#                h2load is installed; one thread: its own CPU is the limit)
#   - HTTP API   POST /v1/take {"pairs": {"domain": "bench", "ip": "0"}} on 16 keep-alive
#                HTTP/1.1 connections (h2load --h1), when the daemon has --http-api (else the
#                row says so)
# Then, as root with perf: the calls to malloc, calloc and realloc divvyd makes per request
# (uprobes on the C library, perf stat) over 100,000 gRPC calls and 100,000 line HITs (nghttp2
# allocates with malloc too: its share is whatever the line HIT's row does not show).
# Each point runs SEC seconds (default 5) after 1 s of unmeasured load, runs times (default 3;
# medians). Targets: gRPC req/s ÷ line HIT >= 0.5; p99 at half the peak <= 1 ms (Envoy's
# default timeout is 20 ms). Before measuring, one call through grpc-load checks that the answer
# is a ShouldRateLimit response with grpc-status 0.
#
# Needs python3; h2load (Debian: nghttp2-client) for the cross-check and HTTP API rows. Everything
# listens on 127.0.0.1 on free ports and is stopped by pid at exit; every load run is bounded by
# timeout(1).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
divvyd=$here/../src/divvyd
bench=$here/divvy-benchmark
load=$here/grpc-load
rules=$here/divvyd-bench-grpc.ini
runs=3
duration=5

while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=$2; shift 2 ;;
	--duration) duration=$2; shift 2 ;;
	--divvyd) divvyd=$2; shift 2 ;;
	--benchmark) bench=$2; shift 2 ;;
	--load) load=$2; shift 2 ;;
	-h | --help) sed -n '3,33p' "$0"; exit 0 ;;
	*) echo "run-bench-grpc.sh: unknown option $1" >&2; exit 2 ;;
	esac
done

if ! command -v python3 >/dev/null 2>&1; then
	echo "run-bench-grpc.sh: python3 is needed" >&2
	exit 1
fi
h2load=""
command -v h2load >/dev/null 2>&1 && h2load=h2load

tmp=$(mktemp -d "${TMPDIR:-/tmp}/divvyd-bench-grpc-XXXXXX")
divvyd_pid=""
cleanup() {
	if [ -n "$divvyd_pid" ]; then
		kill "$divvyd_pid" 2>/dev/null && wait "$divvyd_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# The request, encoded by hand (proto/envoy/service/ratelimit/v3/rls.proto): domain (1),
# descriptors (2) { entries (1) { key (1), value (2) } }; then gRPC's 5-byte prefix.
python3 - "$tmp/request.grpc" <<'EOF'
import struct, sys
def ld(field, payload):
    assert len(payload) < 128
    return bytes([field << 3 | 2, len(payload)]) + payload
msg = ld(1, b"bench") + ld(2, ld(1, ld(1, b"ip") + ld(2, b"0")))
open(sys.argv[1], "wb").write(b"\0" + struct.pack(">I", len(msg)) + msg)
EOF

line_port=$(free_port)
grpc_port=$(free_port)
# The HTTP API (issue #34, section 3), when this divvyd has it: the same counter through JSON
http_api=""
if "$divvyd" --help | grep -q -- '--http-api='; then
	http_port=$(free_port)
	http_api="--http-api=tcp:127.0.0.1:$http_port"
	printf '{"pairs": {"domain": "bench", "ip": "0"}}' >"$tmp/request.json"
fi
root=""
[ "$(id -u)" = 0 ] && root=--allow-root
# shellcheck disable=SC2086 # $root and $http_api: an option each, or nothing
"$divvyd" $root --db "$tmp/db" --listen "tcp:127.0.0.1:$line_port" \
	--grpc "tcp:127.0.0.1:$grpc_port" $http_api "$rules" >"$tmp/divvyd.log" 2>&1 &
divvyd_pid=$!
i=0
until timeout 2 "$bench" -q -n 1 -c 1 "tcp:127.0.0.1:$line_port" >/dev/null 2>&1; do
	i=$((i + 1))
	if [ $i -ge 100 ] || ! kill -0 "$divvyd_pid" 2>/dev/null; then
		echo "run-bench-grpc.sh: divvyd did not start; its log:" >&2
		cat "$tmp/divvyd.log" >&2
		exit 1
	fi
	sleep 0.1
done

url=http://127.0.0.1:$grpc_port/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit
set -- -H 'content-type: application/grpc' -H 'te: trailers' --data="$tmp/request.grpc"
if ! timeout 10 "$load" -n 1 -c 1 -m 1 "tcp:127.0.0.1:$grpc_port" >"$tmp/check.out" 2>&1 ||
	! grep -q '^RESULT .* ok=1 over_limit=0 err=0 ' "$tmp/check.out"; then
	echo "run-bench-grpc.sh: the check call did not end with grpc-status 0 and OK:" >&2
	cat "$tmp/check.out" "$tmp/divvyd.log" >&2
	exit 1
fi

limit=$((duration + 60))
cpu_ticks() {
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}
hz=$(getconf CLK_TCK)
: >"$tmp/results"

# h2load_point NAME ARGS...: h2load for $duration s after 1 s of warm-up; appends
# "NAME rps p50_us p99_us cpu_us_per_request" (latencies from its --log-file)
h2load_point() {
	name=$1
	shift
	rm -f "$tmp/h2load.log" # h2load appends to it
	t0=$(cpu_ticks "$divvyd_pid")
	if ! timeout "$limit" h2load -t 1 -D "$duration" --warm-up-time=1 --log-file="$tmp/h2load.log" \
		"$@" >"$tmp/h2load.out" 2>&1; then
		echo "run-bench-grpc.sh: h2load failed ($name):" >&2
		cat "$tmp/h2load.out" >&2
		exit 1
	fi
	t1=$(cpu_ticks "$divvyd_pid")
	rps=$(sed -n 's/^finished in .*, \([0-9.]*\) req\/s.*/\1/p' "$tmp/h2load.out")
	failed=$(sed -n 's/^requests: .* \([0-9]*\) failed, \([0-9]*\) errored.*/\1 \2/p' "$tmp/h2load.out")
	if [ -z "$rps" ] || [ "$failed" != "0 0" ]; then
		echo "run-bench-grpc.sh: h2load ($name): no rate, or failed requests:" >&2
		cat "$tmp/h2load.out" >&2
		exit 1
	fi
	# status 200 only (-1: a failed stream); the third column: us until the end of the response
	awk -F '\t' '$2 != 200 { bad++ } { print $3 } END { if (bad) exit 1 }' "$tmp/h2load.log" |
		sort -n >"$tmp/lat" || { echo "run-bench-grpc.sh: $name: responses other than 200" >&2; exit 1; }
	n=$(wc -l <"$tmp/lat")
	p50=$(sed -n "$(((n + 1) / 2))p" "$tmp/lat")
	p99=$(sed -n "$(((n * 99 + 99) / 100))p" "$tmp/lat")
	record "$name" "$rps" "$p50" "$p99" "$t0" "$t1"
}

# load_point NAME ARGS...: grpc-load for $duration s after 1 s of warm-up; appends
# "NAME rps p50_us p99_us cpu_us_per_request busy%" (every answer checked: exit status 0)
load_point() {
	name=$1
	shift
	t0=$(cpu_ticks "$divvyd_pid")
	if ! timeout "$limit" "$load" -q -t 1 -d "$duration" -w 1 "$@" "tcp:127.0.0.1:$grpc_port" \
		>"$tmp/load.out" 2>&1; then
		echo "run-bench-grpc.sh: grpc-load failed ($name):" >&2
		cat "$tmp/load.out" >&2
		exit 1
	fi
	t1=$(cpu_ticks "$divvyd_pid")
	field() { sed -n 's/^RESULT .* '"$1"'=\([0-9.]*\).*/\1/p' "$tmp/load.out"; }
	record "$name" "$(field rps)" "$(field p50_us)" "$(field p99_us)" "$t0" "$t1"
	if [ "$(field missed)" != 0 ]; then
		echo "             ($(field missed) calls due never started: the percentiles leave them out)"
	fi
}

# record NAME RPS P50 P99 TICKS0 TICKS1: appends "NAME rps p50_us p99_us cpu_us_per_request
# busy%" to the results and prints it; the CPU ticks cover the warm-up second too, at the
# same rate
record() {
	us=$(awk -v t=$(($6 - $5)) -v hz="$hz" -v r="$2" -v d="$duration" 'BEGIN { printf "%.2f", t / hz * 1e6 / (r * (d + 1)) }')
	busy=$(awk -v t=$(($6 - $5)) -v hz="$hz" -v d="$duration" 'BEGIN { printf "%.0f", t / hz * 100 / (d + 1) }')
	echo "$1 $2 $3 $4 $us $busy" >>"$tmp/results"
	printf '  %-10s %10.0f req/s  p50 %6s us  p99 %6s us  divvyd: %5s us CPU per request, %3s%% busy\n' \
		"$1" "$2" "$3" "$4" "$us" "$busy"
}

echo "gRPC (issue #34): 16 connections x 16 streams, $duration s per point, $runs run(s)"
echo "divvyd:  $("$divvyd" --version | head -n 1); client: grpc-load${h2load:+ (cross-check: $(h2load --version | head -n 1))}"
echo "load:    average $(cut -d" " -f1-3 /proc/loadavg) at start"
run=1
while [ $run -le "$runs" ]; do
	echo "run $run of $runs:"
	t0=$(cpu_ticks "$divvyd_pid")
	out=$(timeout "$limit" "$bench" -q -c 16 -P 16 -d "$duration" -w 1 -k 1 -r 'HIT domain=bench ip=0' \
		"tcp:127.0.0.1:$line_port")
	t1=$(cpu_ticks "$divvyd_pid")
	rps=$(echo "$out" | sed -n 's/^RESULT .* rps=\([0-9.]*\) .*/\1/p')
	p50=$(echo "$out" | sed -n 's/^RESULT .* p50_us=\([0-9.]*\).*/\1/p')
	p99=$(echo "$out" | sed -n 's/^RESULT .* p99_us=\([0-9.]*\).*/\1/p')
	record line-hit "$rps" "$p50" "$p99" "$t0" "$t1"
	load_point grpc-peak -c 16 -m 16
	half=$(awk -v r="$(tail -n 1 "$tmp/results" | cut -d' ' -f2)" 'BEGIN { printf "%d", r / 2 }')
	load_point grpc-half -c 16 -m 16 --rate="$half"
	load_point grpc-1x1 -c 1 -m 1
	[ -z "$h2load" ] || h2load_point h2load-peak -c 16 -m 16 "$@" "$url"
	if [ -n "$http_api" ] && [ -n "$h2load" ]; then
		h2load_point http-api --h1 -c 16 -m 1 -H 'content-type: application/json' \
			--data="$tmp/request.json" "http://127.0.0.1:$http_port/v1/take"
	fi
	run=$((run + 1))
done

# allocs NAME COMMAND...: the allocation calls divvyd makes while COMMAND runs, per request
# (100,000 requests); appended to $tmp/allocs
allocs() {
	an=$1
	shift
	# counted while the load runs (perf stat -p PID -- COMMAND)
	perf stat -x, -e probe_libc:malloc,probe_libc:calloc,probe_libc:realloc -p "$divvyd_pid" \
		-o "$tmp/perf-stat" -- timeout "$limit" "$@" >/dev/null 2>&1 ||
		{ echo "run-bench-grpc.sh: $an failed under perf" >&2; exit 1; }
	a=$(awk -F, '/probe_libc/ { s += $1 } END { printf "%.2f", s / 100000 }' "$tmp/perf-stat")
	echo "$an $a" >>"$tmp/allocs"
	echo "  $an: $a allocation calls per request"
}
libc=$(ldd "$divvyd" | awk '/libc\.so\.6/ { print $3 }')
probes=no # yes: there; made: made here, deleted after
if [ "$(id -u)" = 0 ] && command -v perf >/dev/null 2>&1 && [ -n "$libc" ]; then
	if [ "$(perf probe -l 2>/dev/null | grep -c 'probe_libc:\(malloc\|calloc\|realloc\) ')" = 3 ]; then
		probes=yes
	elif perf probe -q -x "$libc" -a malloc -a calloc -a realloc >/dev/null 2>&1; then
		probes=made
	fi
fi
if [ "$probes" != no ]; then
	echo "allocations (perf probes on $libc's malloc, calloc, realloc):"
	: >"$tmp/allocs"
	allocs grpc "$load" -q -c 16 -m 16 -n 100000 "tcp:127.0.0.1:$grpc_port"
	allocs line-hit "$bench" -q -c 16 -P 16 -n 100000 -k 1 -r 'HIT domain=bench ip=0' "tcp:127.0.0.1:$line_port"
	if [ "$probes" = made ]; then
		perf probe -q -d 'probe_libc:malloc' -d 'probe_libc:calloc' -d 'probe_libc:realloc' >/dev/null 2>&1 || true
	fi
else
	echo "allocations: not measured (needs root, perf and uprobes)"
fi

median() {
	awk -v n="$1" -v col="$2" '$1 == n { print $col }' "$tmp/results" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0 || a == "-" || b == "-") print "-"; else printf "%.2f\n", a / b }'
}

lh=$(median line-hit 2) gp=$(median grpc-peak 2) gh=$(median grpc-half 2)
r=$(ratio "$gp" "$lh")
p99h=$(median grpc-half 4)
met_r=$(awk -v r="$r" 'BEGIN { print (r >= 0.5) ? "met" : "NOT MET" }')
met_p=$(awk -v p="$p99h" 'BEGIN { print (p <= 1000) ? "met" : "NOT MET" }')
echo
echo "Medians of $runs run(s), one counter (domain=bench ip=0), 16 connections:"
echo
cpu_r=$(ratio "$(median grpc-peak 5)" "$(median line-hit 5)")
echo "| row | requests/s | p50 us | p99 us | divvyd CPU us/request | divvyd busy | target |"
echo "|---|---:|---:|---:|---:|---:|---|"
printf '| line HIT, pipeline 16 | %.0f | %s | %s | %s | %s%% | |\n' "$lh" "$(median line-hit 3)" \
	"$(median line-hit 4)" "$(median line-hit 5)" "$(median line-hit 6)"
printf '| gRPC ShouldRateLimit, 16 streams | %.0f | %s | %s | %s (%s × line HIT) | %s%% | ÷ line HIT = %s, >= 0.5: %s |\n' \
	"$gp" "$(median grpc-peak 3)" "$(median grpc-peak 4)" "$(median grpc-peak 5)" "$cpu_r" \
	"$(median grpc-peak 6)" "$r" "$met_r"
printf '| gRPC at half the peak (open loop, --rate) | %.0f | %s | %s | %s | %s%% | p99 <= 1000 us: %s |\n' \
	"$gh" "$(median grpc-half 3)" "$p99h" "$(median grpc-half 5)" "$(median grpc-half 6)" "$met_p"
printf '| gRPC, 1 connection, 1 call at a time | %.0f | %s | %s | %s | %s%% | |\n' \
	"$(median grpc-1x1 2)" "$(median grpc-1x1 3)" "$(median grpc-1x1 4)" "$(median grpc-1x1 5)" "$(median grpc-1x1 6)"
if [ -n "$h2load" ]; then
	printf '| h2load -c 16 -m 16 (cross-check of the client) | %.0f | %s | %s | %s | %s%% | ÷ line HIT = %s |\n' \
		"$(median h2load-peak 2)" "$(median h2load-peak 3)" "$(median h2load-peak 4)" \
		"$(median h2load-peak 5)" "$(median h2load-peak 6)" "$(ratio "$(median h2load-peak 2)" "$lh")"
fi
if [ -s "$tmp/allocs" ]; then
	printf '| allocation calls per request (malloc, calloc, realloc; 100,000 requests) | gRPC %s | line HIT %s | | | | |\n' \
		"$(awk '$1 == "grpc" { print $2 }' "$tmp/allocs")" "$(awk '$1 == "line-hit" { print $2 }' "$tmp/allocs")"
fi
if [ -n "$http_api" ] && [ -n "$h2load" ]; then
	printf '| HTTP API POST /v1/take, 16 keep-alive connections | %.0f | %s | %s | %s | %s%% | ÷ line HIT = %s |\n' \
		"$(median http-api 2)" "$(median http-api 3)" "$(median http-api 4)" "$(median http-api 5)" \
		"$(median http-api 6)" "$(ratio "$(median http-api 2)" "$lh")"
else
	echo "| HTTP API, 16 keep-alive connections | - | - | - | - | - | not measured: no --http-api in this divvyd, or no h2load |"
fi
