#!/bin/sh
# SPDX-License-Identifier: MIT
# divvyd against redis-server on this machine, with the same client (divvy-benchmark),
# the same connections, pipelining and key count, in the same run.
#
#   bench/run-bench.sh [--runs N] [--duration SEC] [--sync MODE] [--10m] [--only-10m]
#                      [--big-actors N] [--divvyd PATH] [--benchmark PATH] [--rules FILE] [--keep]
#
# Starts redis-server (persistence off) and divvyd (temporary database, --sync MODE,
# default periodic) on free loopback ports and a Unix socket in a temporary directory,
# runs the matrix (connections,pipeline) = 1,1 16,1 64,1 16,16 at 10,000 actors against
# redis (INCR key<actor>), divvyd over TCP and divvyd over its Unix socket, N times each
# (medians are reported), and prints the table with the ratios divvyd / redis.
# --10m also pre-fills a fresh divvyd with 10 million counters through the protocol and
# measures (16,16) over them, with the RSS and the data-file size per live counter.
# Needs redis-server (Debian: apt-get install redis-server). Everything it starts listens on
# 127.0.0.1 or in its temporary directory, and is stopped at exit.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
divvyd=${DIVVYD:-$here/../src/divvyd}
bench=${DIVVY_BENCHMARK:-$here/divvy-benchmark}
rules=$here/divvyd-bench.ini
runs=1
duration=5
warmup=1
sync=periodic
with_10m=no
with_matrix=yes
keep=no
actors=10000
big_actors=10000000

while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=$2; shift ;;
	--duration) duration=$2; shift ;;
	--sync) sync=$2; shift ;;
	--10m) with_10m=yes ;;
	--only-10m) with_10m=yes; with_matrix=no ;;
	--big-actors) big_actors=$2; shift ;;
	--divvyd) divvyd=$2; shift ;;
	--benchmark) bench=$2; shift ;;
	--rules) rules=$2; shift ;;
	--keep) keep=yes ;;
	-h | --help)
		sed -n '3,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0 ;;
	*) echo "run-bench.sh: unknown option $1" >&2; exit 2 ;;
	esac
	shift
done

if ! command -v redis-server >/dev/null 2>&1; then
	echo "run-bench.sh: redis-server is needed for the baseline: apt-get install redis-server" >&2
	exit 1
fi
for p in "$divvyd" "$bench"; do
	[ -x "$p" ] || { echo "run-bench.sh: $p is not built (make src/divvyd bench/divvy-benchmark)" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/divvyd-bench.XXXXXX")
redis_pid=""
divvyd_pid=""
stop() { # stop PID: SIGTERM, then wait for it
	[ -n "$1" ] || return 0
	kill "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}
cleanup() {
	stop "$divvyd_pid"
	stop "$redis_pid"
	if [ "$keep" = yes ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# divvyd refuses to run as root without being told
allow_root=""
[ "$(id -u)" -ne 0 ] || allow_root=--allow-root

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_for WHAT ARGS...: runs divvy-benchmark ARGS until it succeeds (10 s at most).
wait_for() {
	what=$1
	shift
	i=0
	until "$bench" -q -n 1 -c 1 "$@" >/dev/null 2>&1; do
		i=$((i + 1))
		if [ $i -ge 100 ]; then
			echo "run-bench.sh: $what did not start; its log:" >&2
			cat "$tmp/$what.log" >&2
			exit 1
		fi
		sleep 0.1
	done
}

start_redis() {
	redis_port=$(free_port)
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" \
		--daemonize no --logfile "$tmp/redis.log" &
	redis_pid=$!
	wait_for redis --redis "tcp:127.0.0.1:$redis_port"
}

# start_divvyd DBDIR: a divvyd on a fresh TCP port and $tmp/divvyd.sock
start_divvyd() {
	divvyd_port=$(free_port)
	divvyd_sock=$tmp/divvyd.sock
	"$divvyd" $allow_root -l "tcp:127.0.0.1:$divvyd_port" -l "unix:$divvyd_sock" -d "$1" --sync="$sync" \
		--map-size=1G "$rules" 2>"$tmp/divvyd.log" &
	divvyd_pid=$!
	wait_for divvyd "unix:$divvyd_sock"
}

# field NAME LINE: the value of NAME=... in a RESULT line
field() {
	echo "$2" | sed -n 's/^RESULT .* '"$1"'=\([^ ]*\).*$/\1/p'
}

# measure NAME C P ARGS...: one run; appends "NAME C P rps p50 p99" to $tmp/results
measure() {
	name=$1 c=$2 pl=$3
	shift 3
	line=$("$bench" -q -c "$c" -P "$pl" -d "$duration" -w "$warmup" "$@" 2>"$tmp/bench.err" | grep '^RESULT ') || {
		echo "run-bench.sh: divvy-benchmark failed ($name, $c,$pl):" >&2
		cat "$tmp/bench.err" >&2
		exit 1
	}
	echo "$name $c $pl $(field rps "$line") $(field p50_us "$line") $(field p99_us "$line")" >>"$tmp/results"
	printf '  %-12s c=%-3s P=%-3s %10s req/s  p50 %7s us  p99 %7s us\n' "$name" "$c" "$pl" \
		"$(field rps "$line")" "$(field p50_us "$line")" "$(field p99_us "$line")"
}

# median NAME C P COLUMN: the median of COLUMN (4 rps, 5 p50, 6 p99) over the runs
median() {
	awk -v n="$1" -v c="$2" -v p="$3" -v col="$4" '$1 == n && $2 == c && $3 == p { print $col }' \
		"$tmp/results" | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-";
		else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f\n", a / b }'
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
echo "machine: $(nproc) CPUs ($cpu), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(uname -sr)"
echo "redis:   $(redis-server --version | sed 's/ sha=.*//')"
echo "divvyd:  $("$divvyd" --version | head -n 1), --sync=$sync; $runs run(s) of ${duration} s (+${warmup} s warm-up) per point"
echo "load:    average $(cut -d" " -f1-3 /proc/loadavg) at start (other work on the machine skews every figure)"
: >"$tmp/results"

points="1,1 16,1 64,1 16,16"
if [ "$with_matrix" = yes ]; then
	start_redis
	start_divvyd "$tmp/db"
	run=1
	while [ $run -le "$runs" ]; do
		echo "run $run of $runs, $actors actors:"
		for pt in $points; do
			c=${pt%,*} pl=${pt#*,}
			measure redis "$c" "$pl" -k "$actors" --redis "tcp:127.0.0.1:$redis_port"
			measure divvyd-tcp "$c" "$pl" -k "$actors" "tcp:127.0.0.1:$divvyd_port"
			measure divvyd-unix "$c" "$pl" -k "$actors" "unix:$divvyd_sock"
		done
		run=$((run + 1))
	done
	stop "$divvyd_pid"
	divvyd_pid=""
	stop "$redis_pid"
	redis_pid=""

	echo
	echo "Medians of $runs run(s), $actors actors, requests/s (ratio = divvyd / redis):"
	echo
	echo "| connections, pipeline | redis INCR | divvyd TCP | ratio | divvyd Unix | ratio | p50 us redis / TCP / Unix | p99 us redis / TCP / Unix |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|"
	for pt in $points; do
		c=${pt%,*} pl=${pt#*,}
		r=$(median redis "$c" "$pl" 4)
		t=$(median divvyd-tcp "$c" "$pl" 4)
		u=$(median divvyd-unix "$c" "$pl" 4)
		echo "| $c, $pl | $r | $t | $(ratio "$t" "$r") | $u | $(ratio "$u" "$r") |" \
			"$(median redis "$c" "$pl" 5) / $(median divvyd-tcp "$c" "$pl" 5) / $(median divvyd-unix "$c" "$pl" 5) |" \
			"$(median redis "$c" "$pl" 6) / $(median divvyd-tcp "$c" "$pl" 6) / $(median divvyd-unix "$c" "$pl" 6) |"
	done
	echo
	echo "Targets (TCP vs redis; Unix vs TCP):"
	check() { # check WHAT VALUE OP LIMIT
		if awk -v v="$2" -v l="$4" -v op="$3" 'BEGIN { exit !(v != "-" && (op == ">=" ? v >= l : v <= l)) }'; then
			echo "  met:     $1 ($2 $3 $4)"
		else
			echo "  NOT MET: $1 ($2, needs $3 $4)"
		fi
	}
	check "1,1 throughput" "$(ratio "$(median divvyd-tcp 1 1 4)" "$(median redis 1 1 4)")" ">=" 0.9
	check "1,1 p99" "$(ratio "$(median divvyd-tcp 1 1 6)" "$(median redis 1 1 6)")" "<=" 1.2
	check "16,1 throughput" "$(ratio "$(median divvyd-tcp 16 1 4)" "$(median redis 16 1 4)")" ">=" 1.0
	check "64,1 throughput" "$(ratio "$(median divvyd-tcp 64 1 4)" "$(median redis 64 1 4)")" ">=" 1.0
	check "16,16 throughput" "$(ratio "$(median divvyd-tcp 16 16 4)" "$(median redis 16 16 4)")" ">=" 0.75
	for pt in $points; do
		c=${pt%,*} pl=${pt#*,}
		check "Unix beats TCP at $c,$pl" "$(ratio "$(median divvyd-unix "$c" "$pl" 4)" "$(median divvyd-tcp "$c" "$pl" 4)")" ">=" 1.0
	done
fi

if [ "$with_10m" = yes ]; then
	echo
	echo "$big_actors actors: pre-filling a fresh database through the protocol (16 connections, pipeline 256)..."
	start_divvyd "$tmp/db-big"
	t0=$(date +%s)
	"$bench" -q -n "$big_actors" -k "$big_actors" --sequential -c 16 -P 256 -w 0 \
		"unix:$divvyd_sock" >"$tmp/prefill.out" 2>&1 || { cat "$tmp/prefill.out" >&2; exit 1; }
	echo "  pre-filled in $(($(date +%s) - t0)) s: $(field rps "$(grep '^RESULT' "$tmp/prefill.out")") HITs/s"
	run=1
	while [ $run -le "$runs" ]; do
		measure big-tcp 16 16 -k "$big_actors" "tcp:127.0.0.1:$divvyd_port"
		measure big-unix 16 16 -k "$big_actors" "unix:$divvyd_sock"
		run=$((run + 1))
	done
	rss_kb=$(awk '/^VmRSS/ { print $2 }' "/proc/$divvyd_pid/status")
	file_bytes=$(stat -c %s "$tmp/db-big/data.mdb")
	disk_bytes=$(($(stat -c %b "$tmp/db-big/data.mdb") * $(stat -c %B "$tmp/db-big/data.mdb")))
	big=$(median big-tcp 16 16 4)
	small=$(median divvyd-tcp 16 16 4)
	echo
	echo "| $big_actors actors, 16, 16 | divvyd TCP | divvyd Unix | TCP / own 10k figure |"
	echo "|---|---:|---:|---:|"
	echo "| requests/s | $big | $(median big-unix 16 16 4) | $(ratio "$big" "$small") |"
	echo
	awk -v rss="$rss_kb" -v f="$file_bytes" -v d="$disk_bytes" -v n="$big_actors" 'BEGIN {
		printf "RSS %.0f MiB = %.1f bytes per live counter; data.mdb %.0f MiB (%.0f MiB allocated on disk) = %.1f bytes per live counter\n",
			rss / 1024, rss * 1024 / n, f / 1048576, d / 1048576, d / n }'
	[ "$small" = "-" ] || echo "(target: TCP / own 10k figure >= 0.7)"
fi
