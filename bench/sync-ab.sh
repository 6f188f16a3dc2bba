#!/bin/sh
# SPDX-License-Identifier: MIT
#
# sync-ab.sh [--pairs N] [--seconds S] [--actors K] [DIVVYD...]
#
# --sync=always ÷ --sync=periodic at 16 connections x 16 pipelined over TCP, measured in
# interleaved pairs (periodic, then always, each on a fresh database in $TMPDIR, default
# /var/tmp: a real disk), so that both modes of one pair see the same minutes of a shared
# machine. Prints every pair: req/s and p99 of each mode, and the ratio; then the median
# ratio. With several DIVVYD builds, each pair runs every build in turn (A/B of builds).
# Never part of make check (timings).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
pairs=4 seconds=5 actors=10000
while [ $# -gt 0 ]; do
	case $1 in
	--pairs) pairs=$2; shift 2 ;;
	--seconds) seconds=$2; shift 2 ;;
	--actors) actors=$2; shift 2 ;;
	-h|--help) sed -n '3,11p' "$0"; exit 0 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || set -- "$here/../src/divvyd"
bench=$here/divvy-benchmark rules=$here/divvyd-bench.ini
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/sync-ab.XXXXXX")
pid=""
trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -rf "$tmp"' EXIT INT TERM

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# one BUILD MODE: prints "rps p99_us" of one 16 x 16 run on a fresh database
one() {
	rm -rf "$tmp/db"
	port=$(free_port)
	"$1" --allow-root --listen="tcp:127.0.0.1:$port" --db="$tmp/db" --sync="$2" "$rules" 2>"$tmp/log" &
	pid=$!
	i=0
	while ! python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null; do
		i=$((i + 1))
		if [ $i -gt 100 ]; then echo "divvyd did not start:" >&2; cat "$tmp/log" >&2; exit 1; fi
		sleep 0.05
	done
	line=$("$bench" -q -c 16 -P 16 -d "$seconds" -w 1 -k "$actors" "tcp:127.0.0.1:$port" | grep '^RESULT' || true)
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=""
	rps=$(echo "$line" | sed -n 's/.* rps=\([0-9.]*\).*/\1/p')
	p99=$(echo "$line" | sed -n 's/.* p99_us=\([0-9.]*\).*/\1/p')
	echo "${rps:-0} ${p99:-0}"
}

ratios=""
p=1
while [ "$p" -le "$pairs" ]; do
	for d in "$@"; do
		pm=$(one "$d" periodic)
		am=$(one "$d" always)
		r=$(echo "$pm $am" | awk '{ printf "%.3f", ($1 > 0 ? $3 / $1 : 0) }')
		echo "$pm $am" | awk -v p="$p" -v d="$d" -v r="$r" \
			'{ printf "pair %d %s: periodic %.0f req/s p99 %s us, always %.0f req/s p99 %s us, always/periodic %s\n", p, d, $1, $2, $3, $4, r }'
		ratios="$ratios $r"
	done
	p=$((p + 1))
done
echo "$ratios" | tr ' ' '\n' | sed '/^$/d' | sort -n |
	awk '{ v[NR] = $1 } END { printf "median always/periodic over %d pairs: %s (min %s, max %s)\n", NR, (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[1], v[NR] }'
