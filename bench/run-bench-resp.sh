#!/bin/sh
# SPDX-License-Identifier: MIT
# RESP on divvyd (issues #17, #33) beside the line protocol and beside redis-server, in one run:
#
#   bench/run-bench-resp.sh [--runs N] [--requests N] [--divvyd PATH] [--benchmark PATH] [--rules FILE]
#
# At 16 connections, pipeline 16, 10,000 actors, N requests per point (default 2,000,000), runs
# times (default 3; medians), all with the same client, divvy-benchmark (--redis speaks RESP and
# reads divvyd's array replies):
#   - line HIT    -> divvyd        HIT method=GET path=/bench ip=<actor>   (the divvy line protocol)
#   - RESP HIT    -> divvyd        HIT method GET path /bench ip <actor>
#   - RESP3 HIT   -> divvyd        the same after HELLO 3 on each connection (--resp3)
#   - EXEC HIT    -> divvyd        the same, each pipeline of 16 in MULTI ... EXEC (--multi): the
#                                  HITs counted, not MULTI, QUEUED or EXEC
#   - CL.THROTTLE -> divvyd        CL.THROTTLE user<actor> 1000000 1000000 1  (--allow-client-limits)
#   - redis INCR  -> redis-server  INCR key<actor>   (the machine's own ceiling)
# Targets: RESP HIT within 10 % of line HIT (requests/s); RESP3 HIT ÷ RESP HIT >= 0.95 and
# EXEC HIT ÷ RESP HIT (16 HITs in one transaction ÷ 16 pipelined) >= 0.8 (issue #33);
# CL.THROTTLE beside redis INCR. Each
# row also reports the server's own CPU time per request (utime + stime of the divvyd or
# redis-server process, /proc/PID/stat, over the point). Noisy on a shared machine: compare
# the ratios of one run.
#
# Needs redis-server (Debian: redis-server), redis-cli and python3 (free ports). Everything listens on 127.0.0.1 on free ports and is stopped by pid at exit; every
# load run is bounded by timeout(1).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
divvyd=$here/../src/divvyd
bench=$here/divvy-benchmark
rules=$here/divvyd-bench.ini
runs=3
requests=2000000
actors=10000

while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=$2; shift 2 ;;
	--requests) requests=$2; shift 2 ;;
	--divvyd) divvyd=$2; shift 2 ;;
	--benchmark) bench=$2; shift 2 ;;
	--rules) rules=$2; shift 2 ;;
	-h | --help) sed -n '3,26p' "$0"; exit 0 ;;
	*) echo "run-bench-resp.sh: unknown option $1" >&2; exit 2 ;;
	esac
done

for tool in redis-server redis-cli python3; do
	if ! command -v $tool >/dev/null 2>&1; then
		echo "run-bench-resp.sh: $tool is needed (apt-get install redis-server redis-tools python3)" >&2
		exit 1
	fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/divvyd-bench-resp-XXXXXX")
redis_pid="" divvyd_pid=""
cleanup() {
	for p in $divvyd_pid $redis_pid; do
		kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_port PORT: until something answers PING there (RESP), bounded
wait_port() {
	i=0
	while [ $i -lt 100 ]; do
		[ "$(timeout 2 redis-cli -p "$1" PING 2>/dev/null)" = PONG ] && return 0
		sleep 0.1
		i=$((i + 1))
	done
	echo "run-bench-resp.sh: nothing answers on port $1" >&2
	exit 1
}

cpu_ticks() {
	awk '{ print $14 + $15 }' "/proc/$1/stat"
}
hz=$(getconf CLK_TCK)

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
	--daemonize no --logfile "$tmp/redis.log" &
redis_pid=$!
divvyd_port=$(free_port)
root=""
[ "$(id -u)" = 0 ] && root=--allow-root
"$divvyd" $root --db "$tmp/db" --listen "tcp:127.0.0.1:$divvyd_port" --allow-client-limits "$rules" \
	>"$tmp/divvyd.log" 2>&1 &
divvyd_pid=$!
wait_port "$redis_port"
wait_port "$divvyd_port"

echo "RESP (issues #17, #33): 16 connections, pipeline 16, $actors actors, $requests requests per point, $runs run(s)"
echo "divvyd:  $("$divvyd" --version | head -n 1); $(redis-server --version | sed 's/ sha=.*//')"
echo "load:    average $(cut -d" " -f1-3 /proc/loadavg) at start"
: >"$tmp/results"

bounded() {
	timeout "$(awk -v n="$requests" 'BEGIN { printf "%d", n / 50000 + 60 }')" "$@"
}

# point NAME PID ARGS...: one divvy-benchmark measurement; PID is the server's
point() {
	name=$1 pid=$2
	shift 2
	t0=$(cpu_ticks "$pid")
	rps=$(bounded "$bench" -q -c 16 -P 16 -n "$requests" -k "$actors" "$@" 2>"$tmp/bench.err" |
		sed -n 's/^RESULT .* rps=\([0-9.]*\) .*/\1/p')
	t1=$(cpu_ticks "$pid")
	if [ -z "$rps" ]; then
		echo "run-bench-resp.sh: $name failed" >&2
		cat "$tmp/bench.err" "$tmp/divvyd.log" >&2 2>/dev/null || true
		exit 1
	fi
	us=$(awk -v t=$((t1 - t0)) -v hz="$hz" -v n="$requests" 'BEGIN { printf "%.3f", t / hz * 1e6 / n }')
	echo "$name $rps $us" >>"$tmp/results"
	printf '  %-12s %10.0f req/s  %7s us CPU per request (server)\n' "$name" "$rps" "$us"
}

run=1
while [ $run -le "$runs" ]; do
	echo "run $run of $runs:"
	point line-hit "$divvyd_pid" "tcp:127.0.0.1:$divvyd_port"
	point resp-hit "$divvyd_pid" --redis -r 'HIT method GET path /bench ip {actor}' "tcp:127.0.0.1:$divvyd_port"
	point resp3-hit "$divvyd_pid" --resp3 -r 'HIT method GET path /bench ip {actor}' "tcp:127.0.0.1:$divvyd_port"
	point exec-hit "$divvyd_pid" --multi -r 'HIT method GET path /bench ip {actor}' "tcp:127.0.0.1:$divvyd_port"
	point cl-throttle "$divvyd_pid" --redis -r 'CL.THROTTLE user{actor} 1000000 1000000 1' \
		"tcp:127.0.0.1:$divvyd_port"
	point redis-incr "$redis_pid" --redis "tcp:127.0.0.1:$redis_port"
	run=$((run + 1))
done

median() {
	awk -v n="$1" -v col="$2" '$1 == n { print $col }' "$tmp/results" | sort -g |
		awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "-"; else printf "%.2f\n", a / b }'
}

lh=$(median line-hit 2) rh=$(median resp-hit 2) cl=$(median cl-throttle 2) ri=$(median redis-incr 2)
r3=$(median resp3-hit 2) ex=$(median exec-hit 2)
lc=$(median line-hit 3) rc=$(median resp-hit 3) cc=$(median cl-throttle 3) ic=$(median redis-incr 3)
r3c=$(median resp3-hit 3) exc=$(median exec-hit 3)
# met RATIO TARGET: whether RATIO reaches TARGET
met() {
	awk -v r="$1" -v t="$2" 'BEGIN { print (r != "-" && r >= t) ? "met" : "NOT MET" }'
}
rps_ratio=$(ratio "$rh" "$lh") r3_ratio=$(ratio "$r3" "$rh") ex_ratio=$(ratio "$ex" "$rh")
echo
echo "Medians of $runs run(s), divvy-benchmark, 16 connections, pipeline 16, $actors actors:"
echo
echo "| row | requests/s | ratio | target | server CPU us/request |"
echo "|---|---:|---:|---|---:|"
printf '| line HIT | %.0f | 1.00 | | %s |\n' "$lh" "$lc"
printf '| RESP HIT | %.0f | %s (÷ line HIT) | >= 0.90: %s | %s |\n' "$rh" "$rps_ratio" "$(met "$rps_ratio" 0.90)" "$rc"
printf '| RESP3 HIT | %.0f | %s (÷ RESP HIT) | >= 0.95: %s | %s |\n' "$r3" "$r3_ratio" "$(met "$r3_ratio" 0.95)" "$r3c"
printf '| EXEC of 16 HITs | %.0f | %s (÷ RESP HIT, 16 pipelined) | >= 0.8: %s | %s |\n' "$ex" "$ex_ratio" \
	"$(met "$ex_ratio" 0.8)" "$exc"
printf '| CL.THROTTLE | %.0f | %s (÷ redis INCR) | | %s |\n' "$cl" "$(ratio "$cl" "$ri")" "$cc"
printf '| redis INCR | %.0f | 1.00 | | %s |\n' "$ri" "$ic"
