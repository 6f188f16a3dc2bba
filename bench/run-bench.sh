#!/bin/sh
# SPDX-License-Identifier: MIT
# divvyd against redis-server on this machine, with the same client (divvy-benchmark),
# the same connections, pipelining and key count, in the same run; ratios, not raw figures,
# are what compares across runs. Prints every run, then one table: each figure beside its
# target (issue #14's), "met" or "NOT MET".
#
#   bench/run-bench.sh [--runs N] [--duration SEC] [--sync MODE] [--no-sync-compare] [--no-algorithms]
#                      [--before PATH] [--10m] [--only-10m] [--big-actors N] [--50m] [--no-big-aof]
#                      [--big-arg ARG]
#                      [--big N] [--only-big] [--io-seconds SEC] [--warm] [--loop-fs]
#                      [--redis-store] [--only-redis-store] [--script PATH]
#                      [--divvyd PATH] [--benchmark PATH] [--rules FILE] [--keep]
#
# The matrix (default; skipped by --only-10m and --only-big): (connections,pipeline) =
# 1,1 16,1 64,1 16,16 at 10,000 actors against redis (INCR key<actor>), divvyd over TCP and
# divvyd over its Unix socket (--sync MODE, default periodic), N times each (medians).
# Then --sync=periodic and --sync=always at 16,16 on fresh databases, back to back, and beside
# them redis-server with an append-only file (--appendfsync everysec, then always) in fresh
# directories: fsync-before-reply on the same disk in the same minutes, reported beside the
# ratio (--no-sync-compare skips it all). Then the algorithms (issue #15) on one daemon at 16,16
# over TCP: HIT on a fixed window, a token bucket and a sliding window, and TAKE 3 on the fixed
# window, each beside the fixed-window HIT (--no-algorithms skips it), after 6 s of unmeasured
# load, each run starting one row later than the one before. --before PATH also measures an
# older divvyd at 16,1 and 16,16 in the same run, for "no lower than before" (else the ratios
# recorded in bench/HISTORY.md).
#
# A big point (--10m: 10 million counters, or --big-actors N; --50m; --big N, repeatable)
# uses actors like IPv4 addresses (divvy-benchmark --ipv4). Redis first: it is pre-filled
# with keys like divvy's own (SETEX divvy:<op>:<actor>:<limit>:<reset> 86400 1) through a
# Unix socket, its RssAnon (/proc/PID/status) read before and after, then INCR at random
# over those keys at 16,16 over TCP; it is stopped before divvyd starts (memory). divvyd:
# a fresh database (the daemon's defaults; --sync only if given), RssAnon before and after
# a pre-fill of one HIT per actor (16 connections, pipeline 256); a clean stop (SIGTERM),
# data.mdb and the --db directory measured; the page cache dropped (root; else "warm", and
# --warm asks for that); started again and timed from exec to the first answered HIT (whose
# credit shows whether the counters survived); 16,16 at random over TCP and Unix; then
# --io-seconds (20) of 16,16 over TCP with write_bytes (/proc/PID/io, living children
# included) read before and after, divided by the HITs answered, and split into the event
# loop's (the journal) and the rest (the checkpoints), with the CPU time of the threads other
# than the event loop (the checkpoints') per HIT. At 10M counters an LMDB checkpoint covers
# 20M HITs (2 per counter), a snapshot 10M: --io-seconds 90 for a steady state. Then the
# restarts after sustained load: SIGKILL right after those runs and a timed start (page cache
# dropped), --io-seconds of 16,16, SIGTERM and a timed start again. Redis without persistence
# is measured beside redis-server with its AOF (--appendfsync everysec, pre-filled the same
# way; --no-big-aof skips it), the persistent peer. --big-arg ARG gives divvyd one more option
# at the big points (e.g. --checkpoint-format=lmdb).
#
# --loop-fs (root): the big points' databases live on an ext4 file system of their own (an
# image file in the temporary directory, mounted through a loop device), and the bytes
# written per HIT are the disk's count: that device's sectors written (/sys/block/loopN/stat),
# which no other process on the machine adds to. write_bytes is shown beside it, but it is
# not the disk's count on Linux 6.x: the kernel adds a whole page-cache folio (up to 2 MiB)
# to write_bytes when a write dirties any part of a clean one, and ext4 then writes only the
# dirty 4 KiB blocks (bench/RESULTS.md, "10 million counters": "bytes written per HIT").
#
# --redis-store (issue #16; --only-redis-store: nothing else) measures divvyd with its counters
# in Redis (--store=redis://), HIT at 16,16 over TCP on 10,000 actors, against the same
# redis-server running the store's own Lua script (src/store/redis-script.lua, or --script
# PATH) directly: EVALSHA with the keys and ARGV a HIT produces, captured from the server's
# MONITOR while divvyd sends one, sent by divvy-benchmark --redis at 16,16. Then two divvyd
# on that Redis, the load split between them (8,16 each, at once; req/s summed, p99 the
# larger), and one divvyd on a Redis Cluster of three primaries (--store=redis+cluster://,
# created with redis-cli --cluster create; --backend-timeout=1000), each beside the script's figure of the same run.
# The EVALSHA calls Redis counted are compared with the HITs answered (divvyd packs up to 64
# lone hits in a call; a HIT answered by the local fallback makes none), and the CPU seconds of redis and divvyd are read from
# /proc/PID/stat: CPU time per HIT for each.
#
# Needs redis-server (Debian: apt-get install redis-server) and python3; --redis-store also
# redis-cli (redis-tools). Everything it starts
# listens on 127.0.0.1 or in its temporary directory, on free ports, and is stopped by pid at
# exit; every load run is bounded in requests or time, and by timeout(1).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
divvyd=${DIVVYD:-$here/../src/divvyd}
bench=${DIVVY_BENCHMARK:-$here/divvy-benchmark}
rules=$here/divvyd-bench.ini
runs=1
duration=5
warmup=1
sync=periodic
sync_given=no
sync_compare=yes
algorithms=yes
before=""
with_10m=no
with_matrix=yes
big_actors=10000000
big_sizes=""
big_aof=yes
big_arg=""
io_seconds=20
warm=no
keep=no
loop_fs=no
loop_dev=""
loop_mnt=""
actors=10000
redis_store=no
script=$here/../src/store/redis-script.lua

# The ratios recorded with the version-1 store (TCP ÷ redis at 10,000 actors, commit
# b3aff2d, bench/HISTORY.md): "no lower than before" when --before is not given.
before_16_1=1.00
before_16_16=0.82
# Redis's memory per key of divvy's own, measured by the issue (for the table).
redis_ref_bytes=207
# Keys like divvy's: divvy:<operation>:<actor>:<creditLimit>:<resetSeconds>, as bench/divvyd-bench.ini.
redis_key='divvy:method=GET&path=/bench:{actor}:1000000000000:86400'

while [ $# -gt 0 ]; do
	case $1 in
	--runs) runs=$2; shift ;;
	--duration) duration=$2; shift ;;
	--sync) sync=$2; sync_given=yes; shift ;;
	--no-sync-compare) sync_compare=no ;;
	--no-algorithms) algorithms=no ;;
	--before) before=$2; shift ;;
	--10m) with_10m=yes ;;
	--only-10m) with_10m=yes; with_matrix=no ;;
	--big-actors) big_actors=$2; shift ;;
	--50m) big_sizes="$big_sizes 50000000" ;;
	--big) big_sizes="$big_sizes $2"; shift ;;
	--only-big) with_matrix=no ;;
	--io-seconds) io_seconds=$2; shift ;;
	--no-big-aof) big_aof=no ;;
	--big-arg) big_arg=$2; shift ;;
	--warm) warm=yes ;;
	--loop-fs) loop_fs=yes ;;
	--divvyd) divvyd=$2; shift ;;
	--benchmark) bench=$2; shift ;;
	--rules) rules=$2; shift ;;
	--keep) keep=yes ;;
	--redis-store) redis_store=yes ;;
	--only-redis-store) redis_store=yes; with_matrix=no ;;
	--script) script=$2; shift ;;
	-h | --help)
		sed -n '3,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0 ;;
	*) echo "run-bench.sh: unknown option $1" >&2; exit 2 ;;
	esac
	shift
done
[ "$with_10m" = no ] || big_sizes="$big_actors $big_sizes"
[ "$with_matrix" = yes ] || [ -n "$big_sizes" ] || [ "$redis_store" = yes ] ||
	{ echo "run-bench.sh: --only-big needs --10m, --50m or --big N" >&2; exit 2; }

if ! command -v redis-server >/dev/null 2>&1; then
	echo "run-bench.sh: redis-server is needed for the baseline: apt-get install redis-server" >&2
	exit 1
fi
for p in "$divvyd" "$bench" ${before:+"$before"}; do
	[ -x "$p" ] || { echo "run-bench.sh: $p is not built (make src/divvyd bench/divvy-benchmark)" >&2; exit 1; }
done
if [ "$redis_store" = yes ]; then
	command -v redis-cli >/dev/null 2>&1 ||
		{ echo "run-bench.sh: --redis-store needs redis-cli: apt-get install redis-tools" >&2; exit 1; }
	[ -r "$script" ] || { echo "run-bench.sh: no script $script (--script PATH)" >&2; exit 1; }
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/divvyd-bench.XXXXXX")
# The rules for --before: an older divvyd knows no "algorithm" (issue #15): the sections with
# one are left out (the fixed-window rules, which the comparison uses, are the same).
awk '/^\[/ { if (sec != "" && !skip) printf "%s", sec; sec = ""; skip = 0 }
	/^algorithm[ \t]*=/ { skip = 1 }
	{ sec = sec $0 "\n" }
	END { if (!skip) printf "%s", sec }' "$rules" >"$tmp/rules-before.ini"
redis_pid=""
divvyd_pid=""
before_pid=""
store_pids="" # --redis-store's divvyd instances
cluster_pids=""
# alive PID: the process exists and is not a zombie waiting for us
alive() {
	[ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}
# stop PID [SECONDS]: SIGTERM, up to SECONDS (10) for it to exit, then SIGKILL; reaps it.
# Sets stop_status (its exit status, or "killed") and stop_secs.
stop() {
	stop_status="" stop_secs=0
	[ -n "$1" ] || return 0
	stop_t0=$(now)
	kill "$1" 2>/dev/null || true
	i=0
	while alive "$1" && [ $i -lt $((${2:-10} * 20)) ]; do
		sleep 0.05
		i=$((i + 1))
	done
	if alive "$1"; then
		kill -9 "$1" 2>/dev/null || true
		stop_status=killed
	fi
	stop_secs=$(awk -v a="$stop_t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
	st=0
	wait "$1" 2>/dev/null || st=$?
	[ -n "$stop_status" ] || stop_status=$st
}
cleanup() {
	stop "$divvyd_pid"
	for p in $store_pids; do
		stop "$p"
	done
	stop "$before_pid"
	stop "$redis_pid"
	for p in $cluster_pids; do
		stop "$p"
	done
	if [ -n "$loop_mnt" ]; then
		umount "$loop_mnt" 2>/dev/null || true
		loop_mnt=""
	fi
	if [ "$keep" = yes ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# divvyd refuses to run as root without being told
allow_root=""
[ "$(id -u)" -ne 0 ] || allow_root=--allow-root

now() { date +%s.%N; }

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# bounded SECONDS COMMAND...: COMMAND, killed after SECONDS (a fraction is fine)
bounded() {
	b_secs=$1
	shift
	timeout --kill-after=5 "$b_secs" "$@"
}

# wait_for WHAT PID ARGS...: runs divvy-benchmark ARGS until it succeeds (10 s at most).
wait_for() {
	what=$1 pid=$2
	shift 2
	i=0
	until bounded 5 "$bench" -q -n 1 -c 1 "$@" >/dev/null 2>&1; do
		i=$((i + 1))
		if [ $i -ge 100 ] || ! alive "$pid"; then
			echo "run-bench.sh: $what did not start; its log:" >&2
			cat "$tmp/$what.log" >&2
			exit 1
		fi
		sleep 0.1
	done
}

# start_redis [DIR APPENDFSYNC]: persistence off; with DIR, an append-only file there (a fresh
# directory: it is created) synced by --appendfsync APPENDFSYNC (always, everysec)
start_redis() {
	redis_port=$(free_port)
	redis_sock=$tmp/redis.sock
	if [ $# -gt 0 ]; then
		mkdir -p "$1"
		set -- --dir "$1" --appendonly yes --appendfsync "$2"
	else
		set -- --dir "$tmp" --appendonly no
	fi
	redis-server --port "$redis_port" --bind 127.0.0.1 --unixsocket "$redis_sock" --save '' \
		"$@" --daemonize no --logfile "$tmp/redis.log" &
	redis_pid=$!
	wait_for redis "$redis_pid" --redis "unix:$redis_sock"
}

# launch_divvyd BINARY DBDIR [SYNC [STORE [HTTP_PORT [OPTION]]]]: starts a divvyd on a fresh TCP port
# and a fresh Unix socket, without waiting; sets launched_pid, divvyd_port, divvyd_sock. No
# --sync when SYNC is empty: the daemon's default; --store=STORE, --http-port=HTTP_PORT and OPTION if given.
sock_n=0
launch_divvyd() {
	divvyd_port=$(free_port)
	sock_n=$((sock_n + 1))
	divvyd_sock=$tmp/divvyd-$sock_n.sock
	r=$rules
	[ "$1" != "$before" ] || r=$tmp/rules-before.ini
	"$1" $allow_root --listen="tcp:127.0.0.1:$divvyd_port" --listen="unix:$divvyd_sock" --db="$2" \
		${3:+--sync="$3"} ${4:+--store="$4"} ${5:+--http-port="$5"} ${6:+"$6"} "$r" 2>>"$tmp/divvyd.log" &
	launched_pid=$!
}

# start_divvyd DBDIR [SYNC [STORE]]: launch_divvyd, then waits until it answers; sets divvyd_pid
start_divvyd() {
	launch_divvyd "$divvyd" "$@"
	divvyd_pid=$launched_pid
	wait_for divvyd "$divvyd_pid" "unix:$divvyd_sock"
}

# field NAME LINE: the value of NAME=... in a RESULT line
field() {
	echo "$2" | sed -n 's/^RESULT .* '"$1"'=\([^ ]*\).*$/\1/p'
}

# rss_anon PID: its anonymous resident memory in bytes (RssAnon of /proc/PID/status);
# rss_shmem PID: its resident shared memory (memfd, shm: not in RssAnon, shown beside it)
# (byte counts go through printf "%.0f": mawk prints integers beyond 2^31 as 2.4e+10)
rss_anon() {
	awk '/^RssAnon:/ { printf "%.0f\n", $2 * 1024 }' "/proc/$1/status"
}
rss_shmem() {
	awk '/^RssShmem:/ { printf "%.0f\n", $2 * 1024 }' "/proc/$1/status"
}

# write_bytes PID: write_bytes of /proc/PID/io (all its threads) plus its living descendants'
# (a reaped child's are added to its parent's by the kernel)
write_bytes() {
	wb=$(awk '/^write_bytes:/ { print $2 }' "/proc/$1/io" 2>/dev/null || true)
	wb=${wb:-0}
	for child in $(cat /proc/"$1"/task/*/children 2>/dev/null || true); do
		wb=$((wb + $(write_bytes "$child")))
	done
	echo "$wb"
}

# loop_write_bytes PID: write_bytes of its main thread alone (divvyd: the event loop, which
# writes the journal; the rest of write_bytes is the checkpoint threads', exited ones included)
loop_write_bytes() {
	awk '/^write_bytes:/ { print $2 }' "/proc/$1/task/$1/io" 2>/dev/null || echo 0
}

# cpu_ticks PID [TID]: user + system clock ticks of the process (exited threads included) or of
# its thread TID (divvyd's main thread is the event loop: the rest is the checkpoints' threads)
cpu_ticks() {
	ct_f=/proc/$1/stat
	[ -z "${2:-}" ] || ct_f=/proc/$1/task/$2/stat
	awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "$ct_f" 2>/dev/null || echo 0
}

# drop_cache: syncs and drops the page cache if permitted; prints cold or warm
drop_cache() {
	if [ "$warm" = no ]; then
		sync
		if (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then echo cold; return; fi
	fi
	echo warm
}

# disk_written: bytes the loop device of --loop-fs has written so far (sectors written, the
# 7th field of /sys/block/DEV/stat, in 512-byte units), or "-" without --loop-fs
disk_written() {
	if [ -n "$loop_dev" ]; then
		awk '{ printf "%.0f\n", $7 * 512 }' "/sys/block/$loop_dev/stat"
	else
		echo -
	fi
}

# loop_fs_setup N: an ext4 file system for N counters' database, mounted at $tmp/loop-fs
# through a loop device (losetup picks a free one); sets loop_mnt and loop_dev
loop_fs_setup() {
	[ "$(id -u)" -eq 0 ] || { echo "run-bench.sh: --loop-fs needs root (mount)" >&2; exit 1; }
	# data.mdb (about 100 bytes a counter, twice over while a checkpoint runs) and up to
	# 2 GiB of journal, with room to spare; a sparse file: only what is written is allocated
	truncate -s $((4 * 1024 * 1024 * 1024 + $1 * 400)) "$tmp/loop-fs.img"
	mkfs.ext4 -q -F "$tmp/loop-fs.img"
	mkdir -p "$tmp/loop-fs"
	mount -o loop "$tmp/loop-fs.img" "$tmp/loop-fs"
	loop_mnt=$tmp/loop-fs
	loop_dev=$(basename "$(findmnt -n -o SOURCE "$loop_mnt")")
	[ -r "/sys/block/$loop_dev/stat" ] || { echo "run-bench.sh: no /sys/block/$loop_dev/stat" >&2; exit 1; }
}

# allocated PATH...: bytes allocated on disk (not the apparent size) by the files under PATH
allocated() {
	du -s -B1 "$@" 2>/dev/null | awk '{ s += $1 } END { printf "%.0f\n", s }'
}

# measure NAME C P ARGS...: one run; appends "NAME C P rps p50 p99 replies" to $tmp/results
# (replies: every reply, warm-up included, for the bytes written per HIT)
measure() {
	name=$1 c=$2 pl=$3
	shift 3
	line=$(bounded "$(awk -v d="$duration" -v w="$warmup" 'BEGIN { print d + w + 30 }')" \
		"$bench" -q -c "$c" -P "$pl" -d "$duration" -w "$warmup" "$@" 2>"$tmp/bench.err" | grep '^RESULT ') || {
		echo "run-bench.sh: divvy-benchmark failed ($name, $c,$pl):" >&2
		cat "$tmp/bench.err" >&2
		exit 1
	}
	echo "$name $c $pl $(field rps "$line") $(field p50_us "$line") $(field p99_us "$line")" \
		"$(($(field ok_true "$line") + $(field ok_false "$line")))" >>"$tmp/results"
	printf '  %-18s c=%-3s P=%-3s %10s req/s  p50 %7s us  p99 %7s us\n' "$name" "$c" "$pl" \
		"$(field rps "$line")" "$(field p50_us "$line")" "$(field p99_us "$line")"
}

# median NAME C P COLUMN: the median of COLUMN (4 rps, 5 p50, 6 p99) over the runs
median() {
	awk -v n="$1" -v c="$2" -v p="$3" -v col="$4" '$1 == n && $2 == c && $3 == p { print $col }' \
		"$tmp/results" | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "-";
		else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.1f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# total NAME COLUMN: the sum of COLUMN over NAME's runs
total() {
	awk -v n="$1" -v col="$2" '$1 == n { s += $col } END { printf "%.0f\n", s }' "$tmp/results"
}

ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f\n", a / b }'
}

# per A B: A / B with one decimal ("-" if either is missing)
per() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.1f\n", a / b }'
}

# mib BYTES: in MiB, one decimal
mib() {
	awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'
}

# short N: 10000000 -> 10M, 300000 -> 300k
short() {
	awk -v n="$1" 'BEGIN { if (n % 1000000 == 0) print n / 1000000 "M"; else if (n % 1000 == 0) print n / 1000 "k"; else print n }'
}

# row MEASURE FIGURE OP LIMIT [NOTE]: a line of the final table, checked (OP >= or <=);
# row MEASURE FIGURE - - NOTE: a figure reported without a target
row() {
	if [ "$3" = - ]; then
		verdict="" target=""
	else
		target="$3 $4"
		if awk -v v="$2" -v l="$4" -v op="$3" 'BEGIN { exit !(v != "-" && (op == ">=" ? v + 0 >= l : v + 0 <= l)) }'; then
			verdict=met
		else
			verdict="NOT MET"
		fi
	fi
	echo "| $1 | $2 | $target | $verdict | ${5:-} |" >>"$tmp/summary"
}

cat >"$tmp/probe.py" <<'EOF'
# probe.py SOCKET T0 TIMEOUT LINE: connects (retrying), sends LINE, prints
# "<seconds since T0> <reply>" when the reply is read; exit 1 after TIMEOUT seconds.
import socket, sys, time
path, t0, limit, line = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
end = t0 + limit
while True:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        break
    except OSError:
        s.close()
        if time.time() > end:
            print("- no connection")
            sys.exit(1)
        time.sleep(0.002)
buf = b""
try:
    s.settimeout(max(0.01, end - time.time()))
    s.sendall((line + "\n").encode())
    while not buf.endswith(b"\n"):
        s.settimeout(max(0.01, end - time.time()))
        d = s.recv(4096)
        if not d:
            break
        buf += d
except OSError:
    pass
if not buf.endswith(b"\n"):
    print("- no answer")
    sys.exit(1)
print("%.3f %s" % (time.time() - t0, buf.decode().strip()))
EOF

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
echo "machine: $(nproc) CPUs ($cpu), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $(uname -sr)"
echo "redis:   $(redis-server --version | sed 's/ sha=.*//')"
echo "divvyd:  $("$divvyd" --version | head -n 1); $runs run(s) of ${duration} s (+${warmup} s warm-up) per point"
echo "load:    average $(cut -d" " -f1-3 /proc/loadavg) at start (other work on the machine skews every figure)"
: >"$tmp/results"
: >"$tmp/summary"

points="1,1 16,1 64,1 16,16"
if [ "$with_matrix" = yes ]; then
	echo
	echo "== $actors actors, --sync=$sync =="
	start_redis
	start_divvyd "$tmp/db" "$sync"
	if [ -n "$before" ]; then
		launch_divvyd "$before" "$tmp/db-before" "$sync"
		before_pid=$launched_pid before_port=$divvyd_port
		wait_for divvyd "$before_pid" "tcp:127.0.0.1:$before_port"
	fi
	run=1
	while [ $run -le "$runs" ]; do
		echo "run $run of $runs, $actors actors:"
		for pt in $points; do
			c=${pt%,*} pl=${pt#*,}
			measure redis "$c" "$pl" -k "$actors" --redis "tcp:127.0.0.1:$redis_port"
			measure divvyd-tcp "$c" "$pl" -k "$actors" "tcp:127.0.0.1:$divvyd_port"
			measure divvyd-unix "$c" "$pl" -k "$actors" "unix:$divvyd_sock"
			case $pt in 16,1 | 16,16)
				[ -z "$before" ] || measure before-tcp "$c" "$pl" -k "$actors" "tcp:127.0.0.1:$before_port" ;;
			esac
		done
		run=$((run + 1))
	done
	stop "$before_pid"
	before_pid=""
	stop "$divvyd_pid"
	divvyd_pid=""
	stop "$redis_pid"
	redis_pid=""

	if [ "$sync_compare" = yes ]; then
		echo "--sync=periodic and --sync=always, 16,16, $actors actors, fresh databases; beside them"
		echo "redis-server with an append-only file, --appendfsync everysec and always, fresh directories:"
		run=1
		while [ $run -le "$runs" ]; do
			for mode in periodic always; do
				start_divvyd "$tmp/db-$mode-$run" "$mode"
				measure "sync-$mode" 16 16 -k "$actors" "tcp:127.0.0.1:$divvyd_port"
				stop "$divvyd_pid"
				divvyd_pid=""
			done
			for mode in everysec always; do
				start_redis "$tmp/aof-$mode-$run" "$mode"
				measure "aof-$mode" 16 16 -k "$actors" --redis "tcp:127.0.0.1:$redis_port"
				stop "$redis_pid"
				redis_pid=""
				rm -rf "$tmp/aof-$mode-$run"
			done
			run=$((run + 1))
		done
	fi

	if [ "$algorithms" = yes ]; then
		echo "The algorithms (issue #15), 16,16 over TCP, $actors actors, one daemon (--sync=$sync):"
		start_divvyd "$tmp/db-algo" "$sync"
		# Unmeasured load first, past the daemon's first checkpoint (256 MiB of journal,
		# about 5 s here): the first row measured on a fresh daemon would otherwise be the
		# only one without a checkpoint running beside it. And each run starts one row
		# later (fixed, tb, sw, take3; then tb, sw, take3, fixed; ...), so that no row is
		# always the one that follows another's checkpoint.
		bounded 60 "$bench" -q -c 16 -P 16 -d 6 -k "$actors" "tcp:127.0.0.1:$divvyd_port" >/dev/null
		rows="fixed:HIT:/bench tb:HIT:/bench-tb sw:HIT:/bench-sw take3:TAKE_3:/bench"
		run=1
		while [ $run -le "$runs" ]; do
			skip=$(((run - 1) % 4))
			for a in $(echo $rows $rows | cut -d' ' -f$((skip + 1))-$((skip + 4))); do
				measure "algo-${a%%:*}" 16 16 -k "$actors" \
					-r "$(echo "$a" | cut -d: -f2 | tr _ ' ') method=GET path=${a##*:} ip={actor}" \
					"tcp:127.0.0.1:$divvyd_port"
			done
			run=$((run + 1))
		done
		stop "$divvyd_pid"
		divvyd_pid=""
	fi

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

	tcp_ratio() { ratio "$(median divvyd-tcp "$1" "$2" "${3:-4}")" "$(median redis "$1" "$2" "${3:-4}")"; }
	k=$(short "$actors")
	row "$k, 1×1: TCP ÷ redis" "$(tcp_ratio 1 1)" ">=" 0.9
	row "$k, 1×1: p99 TCP ÷ redis" "$(tcp_ratio 1 1 6)" "<=" 1.2
	for pt in 16,1 16,16; do
		c=${pt%,*} pl=${pt#*,}
		if [ -n "$before" ]; then
			b=$(ratio "$(median before-tcp "$c" "$pl" 4)" "$(median redis "$c" "$pl" 4)")
			src="before: --before divvyd, same run ($(median before-tcp "$c" "$pl" 4) req/s)"
		else
			[ "$pt" = 16,1 ] && b=$before_16_1 || b=$before_16_16
			src="before: the figure recorded at b3aff2d (--before PATH measures it in this run)"
		fi
		row "$k, $c×$pl: TCP ÷ redis" "$(tcp_ratio "$c" "$pl")" ">=" "$b" "$src"
	done
	row "$k, 64×1: TCP ÷ redis" "$(tcp_ratio 64 1)" ">=" 1.0
	worst="" worst_pt=""
	for pt in $points; do
		c=${pt%,*} pl=${pt#*,}
		r=$(ratio "$(median divvyd-unix "$c" "$pl" 4)" "$(median divvyd-tcp "$c" "$pl" 4)")
		if [ -z "$worst" ] || awk -v a="$r" -v b="$worst" 'BEGIN { exit !(a == "-" || a + 0 < b + 0) }'; then
			worst=$r worst_pt="$c×$pl"
		fi
	done
	row "$k: Unix ÷ TCP, the lowest of the 4 points" "$worst" ">=" 1.0 "at $worst_pt"
	if [ "$sync_compare" = yes ]; then
		a=$(median sync-always 16 16 4) p=$(median sync-periodic 16 16 4)
		row "$k, 16×16: --sync=always ÷ --sync=periodic" "$(ratio "$a" "$p")" ">=" 0.5 "$a ÷ $p req/s"
		ra=$(median aof-always 16 16 4) re=$(median aof-everysec 16 16 4)
		row "$k, 16×16: redis --appendfsync always ÷ everysec (the same disk's reference)" \
			"$(ratio "$ra" "$re")" - "" "$ra ÷ $re req/s"
		row "$k, 16×16: divvyd --sync=always ÷ redis --appendfsync always" "$(ratio "$a" "$ra")" - "" \
			"p99 $(median sync-always 16 16 6) / $(median aof-always 16 16 6) us"
		row "$k, 16×16: divvyd --sync=periodic ÷ redis --appendfsync everysec" "$(ratio "$p" "$re")" - "" \
			"p99 $(median sync-periodic 16 16 6) / $(median aof-everysec 16 16 6) us"
	fi
	if [ "$algorithms" = yes ]; then
		f=$(median algo-fixed 16 16 4)
		for a in tb:"token-bucket HIT" sw:"sliding-window HIT" take3:"TAKE 3 (fixed window)"; do
			v=$(median "algo-${a%%:*}" 16 16 4)
			row "$k, 16×16: ${a#*:} ÷ fixed-window HIT" "$(ratio "$v" "$f")" ">=" 0.9 "$v ÷ $f req/s"
		done
	fi
fi

# big_point N: the scale measures at N counters (see the header)
big_point() {
	n=$1
	k=$(short "$n")
	bsync=""
	[ "$sync_given" = no ] || bsync=$sync
	prefill_limit=$((120 + n / 10000)) # seconds: far beyond 10,000 HITs/s
	echo
	echo "== $n counters, actors like IPv4 addresses, divvyd ${bsync:+--sync=$bsync}${bsync:-default settings}${big_arg:+ $big_arg} =="
	avail=$(awk '/MemAvailable/ { printf "%.0f\n", $2 * 1024 }' /proc/meminfo)
	echo "memory available: $(mib "$avail")"
	# redis needs about 207 bytes a key (the most of anything here): refuse rather than
	# push a shared machine into the OOM killer
	if [ "$avail" -lt $((n * 260)) ]; then
		echo "run-bench.sh: $n keys need about $(mib $((n * 260))) for redis; $(mib "$avail") available" >&2
		exit 1
	fi

	start_redis
	r0=$(rss_anon "$redis_pid")
	t0=$(now)
	bounded "$prefill_limit" "$bench" -q -n "$n" -k "$n" --sequential --ipv4 -c 16 -P 256 -w 0 --redis \
		-r "SETEX $redis_key 86400 1" "unix:$redis_sock" >"$tmp/prefill.out" 2>&1 ||
		{ cat "$tmp/prefill.out" >&2; exit 1; }
	r1=$(rss_anon "$redis_pid")
	echo "  redis pre-filled (SETEX) in $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s:" \
		"$(field rps "$(grep '^RESULT' "$tmp/prefill.out")") keys/s; RssAnon $(mib "$r0") -> $(mib "$r1")"
	run=1
	while [ $run -le "$runs" ]; do
		measure "redis-$k" 16 16 -k "$n" --ipv4 --redis -r "$redis_key" "tcp:127.0.0.1:$redis_port"
		run=$((run + 1))
	done
	stop "$redis_pid"
	redis_pid=""
	if [ "$big_aof" = yes ]; then
		# the persistent peer: redis-server with its AOF (everysec), pre-filled the same way
		start_redis "$tmp/aof-$k" everysec
		bounded "$prefill_limit" "$bench" -q -n "$n" -k "$n" --sequential --ipv4 -c 16 -P 256 -w 0 --redis \
			-r "SETEX $redis_key 86400 1" "unix:$redis_sock" >"$tmp/prefill.out" 2>&1 ||
			{ cat "$tmp/prefill.out" >&2; exit 1; }
		run=1
		while [ $run -le "$runs" ]; do
			measure "redis-aof-$k" 16 16 -k "$n" --ipv4 --redis -r "$redis_key" "tcp:127.0.0.1:$redis_port"
			run=$((run + 1))
		done
		stop "$redis_pid" 120
		redis_pid=""
		rm -rf "$tmp/aof-$k"
	fi

	db=$tmp/db-$k
	if [ "$loop_fs" = yes ]; then
		[ -n "$loop_mnt" ] || loop_fs_setup "$n"
		db=$loop_mnt/db-$k
		echo "  database on its own ext4 file system: $loop_mnt (/dev/$loop_dev)"
	fi
	start_divvyd "$db" "$bsync" "" "" "$big_arg"
	d0=$(rss_anon "$divvyd_pid")
	t0=$(now)
	bounded "$prefill_limit" "$bench" -q -n "$n" -k "$n" --sequential --ipv4 -c 16 -P 256 -w 0 \
		"unix:$divvyd_sock" >"$tmp/prefill.out" 2>&1 || { cat "$tmp/prefill.out" >&2; exit 1; }
	prefill_rate=$(field rps "$(grep '^RESULT' "$tmp/prefill.out")")
	d1=$(rss_anon "$divvyd_pid")
	echo "  divvyd pre-filled in $(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }') s:" \
		"$prefill_rate HITs/s; RssAnon $(mib "$d0") -> $(mib "$d1") (RssShmem $(mib "$(rss_shmem "$divvyd_pid")"))"

	stop "$divvyd_pid" 600
	divvyd_pid=""
	echo "  stopped (SIGTERM) in $stop_secs s, exit status $stop_status"
	mdb=$(allocated "$db/data.mdb")
	mdb_size=$(stat -c %s "$db/data.mdb" 2>/dev/null || echo 0)
	dir=$(allocated "$db")
	wal=0 segs=0
	for f in "$db"/wal-*.divvyd; do
		[ -e "$f" ] || continue
		wal=$((wal + $(allocated "$f")))
		segs=$((segs + 1))
	done
	echo "  --db: data.mdb $(mib "$mdb") allocated ($(mib "$mdb_size") apparent)," \
		"$segs journal segments $(mib "$wal"), directory $(mib "$dir")"

	cache=$(drop_cache)
	# actor 1 as divvy-benchmark --ipv4 renders it: hit once by the pre-fill
	probe_ip=$(python3 -c 'x = (1 * 0x9E3779B1) & 0xFFFFFFFF; x ^= x >> 16; print(".".join(str(x >> s & 255) for s in (24, 16, 8, 0)))')
	t0=$(now)
	launch_divvyd "$divvyd" "$db" "$bsync" "" "" "$big_arg"
	divvyd_pid=$launched_pid
	probe=$(python3 "$tmp/probe.py" "$divvyd_sock" "$t0" 300 "HIT method=GET path=/bench ip=$probe_ip") || {
		echo "run-bench.sh: divvyd did not answer within 300 s of its start ($probe); its log:" >&2
		cat "$tmp/divvyd.log" >&2
		exit 1
	}
	startup=${probe%% *}
	credit=$(echo "$probe" | awk '{ print $4 }')
	kept=no
	[ "$credit" != 999999999998 ] || kept=yes
	echo "  started again ($cache page cache): first HIT answered after $startup s: ${probe#* }"
	d2=$(rss_anon "$divvyd_pid")

	run=1
	while [ $run -le "$runs" ]; do
		measure "divvyd-tcp-$k" 16 16 -k "$n" --ipv4 "tcp:127.0.0.1:$divvyd_port"
		measure "divvyd-unix-$k" 16 16 -k "$n" --ipv4 "unix:$divvyd_sock"
		run=$((run + 1))
	done
	w0=$(write_bytes "$divvyd_pid")
	l0=$(loop_write_bytes "$divvyd_pid")
	k0=$(disk_written)
	c0=$(cpu_ticks "$divvyd_pid") m0=$(cpu_ticks "$divvyd_pid" "$divvyd_pid")
	saved_duration=$duration
	duration=$io_seconds
	measure "io-$k" 16 16 -k "$n" --ipv4 "tcp:127.0.0.1:$divvyd_port"
	duration=$saved_duration
	w1=$(write_bytes "$divvyd_pid")
	l1=$(loop_write_bytes "$divvyd_pid")
	k1=$(disk_written)
	c1=$(cpu_ticks "$divvyd_pid") m1=$(cpu_ticks "$divvyd_pid" "$divvyd_pid")
	d3=$(rss_anon "$divvyd_pid")
	hits=$(total "io-$k" 7)
	# CPU of the threads other than the event loop (with --sync=periodic: the checkpoints')
	ckpt_cpu=$(awk -v t=$((c1 - c0 - m1 + m0)) -v hz="$(getconf CLK_TCK)" -v h="$hits" \
		'BEGIN { if (h == 0) print "-"; else printf "%.3f\n", t / hz * 1e6 / h }')
	echo "  written during ${io_seconds} s of 16,16 (+${warmup} s warm-up): $(mib $((w1 - w0))) for $hits HITs;" \
		"RssAnon after the restart $(mib "$d2"), after the runs $(mib "$d3")"
	# Restarts after sustained load (the journal behind the last checkpoint whatever it is):
	# SIGKILL, then SIGTERM after --io-seconds more of 16,16; each timed to the first answer
	kill -9 "$divvyd_pid" 2>/dev/null || true
	wait "$divvyd_pid" 2>/dev/null || true
	divvyd_pid=""
	jk=$(du -sb "$db" 2>/dev/null | awk '{ print $1 }')
	cache2=$(drop_cache)
	t0=$(now)
	launch_divvyd "$divvyd" "$db" "$bsync" "" "" "$big_arg"
	divvyd_pid=$launched_pid
	probe=$(python3 "$tmp/probe.py" "$divvyd_sock" "$t0" 300 "HIT method=GET path=/bench ip=$probe_ip") || {
		echo "run-bench.sh: divvyd did not answer within 300 s of its restart after SIGKILL" >&2
		exit 1
	}
	startup_kill=${probe%% *}
	echo "  SIGKILLed after the runs (--db $(mib "$jk")), started again ($cache2 page cache):" \
		"first HIT answered after $startup_kill s: ${probe#* }"
	saved_duration=$duration
	duration=$io_seconds
	measure "load-$k" 16 16 -k "$n" --ipv4 "tcp:127.0.0.1:$divvyd_port"
	duration=$saved_duration
	stop "$divvyd_pid" 600
	divvyd_pid=""
	echo "  stopped (SIGTERM) after ${io_seconds} s more of 16,16 in $stop_secs s, exit status $stop_status"
	cache3=$(drop_cache)
	t0=$(now)
	launch_divvyd "$divvyd" "$db" "$bsync" "" "" "$big_arg"
	divvyd_pid=$launched_pid
	probe=$(python3 "$tmp/probe.py" "$divvyd_sock" "$t0" 300 "HIT method=GET path=/bench ip=$probe_ip") || {
		echo "run-bench.sh: divvyd did not answer within 300 s of its restart after SIGTERM" >&2
		exit 1
	}
	startup_term=${probe%% *}
	echo "  started again ($cache3 page cache): first HIT answered after $startup_term s: ${probe#* }"

	stop "$divvyd_pid" 600
	divvyd_pid=""
	mdb2=$(allocated "$db/data.mdb")
	echo "  stopped again in $stop_secs s, exit status $stop_status: data.mdb $(mib "$mdb2") allocated," \
		"directory $(mib "$(allocated "$db")")"
	[ "$mdb2" -le "$mdb" ] || mdb=$mdb2

	t=$(median "divvyd-tcp-$k" 16 16 4) r=$(median "redis-$k" 16 16 4)
	row "$k, 16×16: TCP ÷ redis INCR on $k keys" "$(ratio "$t" "$r")" ">=" 0.8 "$t ÷ $r req/s"
	tp=$(median "divvyd-tcp-$k" 16 16 6) rp=$(median "redis-$k" 16 16 6)
	row "$k, 16×16: p99 TCP ÷ redis" "$(ratio "$tp" "$rp")" "<=" 2 "$tp ÷ $rp us"
	ip=$(median "io-$k" 16 16 6) it=$(median "io-$k" 16 16 4)
	row "$k, 16×16 over ${io_seconds} s with checkpoints: TCP ÷ redis; p99 ÷ redis's" "$(ratio "$it" "$r"); $(ratio "$ip" "$rp")" - - \
		"$it ÷ $r req/s; p99 $ip ÷ $rp us (targets: >= 1.0; <= 2)"
	row "$k, 16×16: Unix (req/s)" "$(median "divvyd-unix-$k" 16 16 4)" - - "pre-fill: $prefill_rate HITs/s"
	small=$(median divvyd-tcp 16 16 4)
	[ "$small" = - ] || row "$k, 16×16: TCP ÷ own 10k figure" "$(ratio "$t" "$small")" - - "the target before #14 was >= 0.7"
	mx=$d1
	[ "$d3" -le "$mx" ] || mx=$d3
	row "$k: divvyd RssAnon per live counter (bytes)" "$(per $((mx - d0)) "$n")" "<=" 64 \
		"the larger of after the pre-fill ($(per $((d1 - d0)) "$n")) and after the runs ($(per $((d3 - d0)) "$n")), less before"
	row "$k: redis RssAnon per key like divvy's (bytes)" "$(per $((r1 - r0)) "$n")" - - "the issue's reference: $redis_ref_bytes"
	row "$k: data.mdb per live counter (bytes)" "$(per "$mdb" "$n")" "<=" 100 \
		"allocated, the larger of after the pre-fill and after the runs (clean stops)"
	row "$k: --db directory per live counter (bytes)" "$(per "$dir" "$n")" - - "$segs journal segments: $(per "$wal" "$n")"
	wdetail="write_bytes over ${io_seconds} s at 16×16: $(per $((w1 - w0)) "$hits") = $(per $((l1 - l0)) "$hits") by the event loop (journal) + $(per $((w1 - w0 - l1 + l0)) "$hits") by checkpoints (at 10M an LMDB checkpoint covers 20M HITs, a snapshot 10M: --io-seconds 90 for a steady state)"
	if [ "$k0" != - ]; then
		row "$k: bytes written per HIT (the disk's count)" "$(per $((k1 - k0)) "$hits")" "<=" 128 \
			"/dev/$loop_dev's sectors written over ${io_seconds} s; $wdetail, which counts whole page-cache folios"
	else
		row "$k: bytes written per HIT (write_bytes)" "$(per $((w1 - w0)) "$hits")" "<=" 128 \
			"$wdetail; write_bytes counts whole page-cache folios, more than the disk writes: --loop-fs counts the disk"
	fi
	row "$k: start-up to first answer (s, $cache)" "$startup" "<=" 3 "counters kept: $kept"
	row "$k: start-up after SIGTERM under sustained load (s, $cache3)" "$startup_term" "<=" 3 \
		"after ${io_seconds} s of 16,16 following a SIGKILL restart"
	row "$k: start-up after SIGKILL under sustained load (s, $cache2)" "$startup_kill" "<=" 4 \
		"after ${io_seconds} s of 16,16 and the runs"
	row "$k: checkpoint CPU per HIT (us)" "$ckpt_cpu" - - "CPU of the threads other than the event loop over the ${io_seconds} s"
	if [ "$big_aof" = yes ]; then
		a=$(median "redis-aof-$k" 16 16 4)
		row "$k, 16×16: TCP ÷ redis AOF everysec" "$(ratio "$t" "$a")" - - \
			"$t ÷ $a req/s; p99 $tp / $(median "redis-aof-$k" 16 16 6) us"
	fi
}

# The Redis store (issue #16, --redis-store): see the header.
cat >"$tmp/capture.py" <<'EOF'
# capture.py REDIS_PORT DIVVYD_PORT MARKER TIMEOUT: watches redis-server's MONITOR while
# sending "HIT method=GET path=/bench ip=MARKER" to divvyd (again until it shows), and prints
# the EVALSHA divvyd sent for it, its words joined by tabs, MARKER replaced by {actor}: a
# divvy-benchmark --redis template. Exit 1 if none is seen within TIMEOUT seconds.
import re, socket, sys, time
rport, dport, marker, limit = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
end = time.time() + limit
mon = socket.create_connection(("127.0.0.1", rport), timeout=limit)
buf = b""


def line(deadline):
    global buf
    while b"\r\n" not in buf:
        mon.settimeout(max(0.01, deadline - time.time()))
        d = mon.recv(65536)
        if not d:
            sys.exit("capture.py: MONITOR connection closed")
        buf += d
    ln, buf = buf.split(b"\r\n", 1)
    return ln.decode("latin-1")


def unescape(s):  # sdscatrepr's escapes
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n == "x":
                out.append(chr(int(s[i + 2:i + 4], 16)))
                i += 4
                continue
            out.append({"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b"}.get(n, n))
            i += 2
            continue
        out.append(s[i])
        i += 1
    return "".join(out)


mon.sendall(b"MONITOR\r\n")
if line(end) != "+OK":
    sys.exit("capture.py: MONITOR refused")
word = re.compile(r'"((?:[^"\\]|\\.)*)"')
while time.time() < end:
    d = socket.create_connection(("127.0.0.1", dport), timeout=max(0.1, end - time.time()))
    d.sendall(("HIT method=GET path=/bench ip=%s\n" % marker).encode())
    reply = b""
    while not reply.endswith(b"\n"):
        r = d.recv(4096)
        if not r:
            break
        reply += r
    d.close()
    until = min(end, time.time() + 0.5)
    while time.time() < until:
        try:
            ln = line(until)
        except socket.timeout:
            break
        if "] " not in ln:
            continue
        words = [unescape(w) for w in word.findall(ln.split("] ", 1)[1])]
        if not words or words[0].upper() != "EVALSHA" or not any(marker in w for w in words):
            continue
        if any("\t" in w for w in words):
            sys.exit("capture.py: a word of the EVALSHA holds a tab")
        print("\t".join(w.replace(marker, "{actor}") for w in words))
        sys.exit(0)
sys.exit("capture.py: no EVALSHA for %s within %.0f s (divvyd not connected to redis?)" % (marker, limit))
EOF

# evalsha_calls PORT...: the EVALSHA and EVAL calls these redis-servers have run so far, summed
evalsha_calls() {
	for p in "$@"; do
		redis-cli -p "$p" INFO commandstats | tr -d '\r' |
			sed -n 's/^cmdstat_eval\(sha\)\{0,1\}:calls=\([0-9]*\),.*/\2/p'
	done | awk '{ s += $1 } END { printf "%.0f\n", s }'
}

# redis_counted PORT: the credits taken from every divvy 1.7 key (divvy:...:LIMIT:RESET, value
# the credits left) on the redis-server at PORT: what the HITs that reached it have counted
redis_counted() {
	redis-cli -p "$1" EVAL "local s = 0
		for _, k in ipairs(redis.call('KEYS', 'divvy:*')) do
			s = s + tonumber(k:match(':(%d+):%d+\$')) - tonumber(redis.call('GET', k))
		end
		return tostring(s)" 0
}

# fallbacks HTTP_PORT...: the hits the divvyd instances serving metrics on HTTP_PORT... have
# answered by their onBackendError policy (divvyd_backend_fallbacks_total, every policy)
fallbacks() {
	for p in "$@"; do
		python3 -c 'import sys, urllib.request
print(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=10).read().decode())' "$p"
	done | awk '/^divvyd_backend_fallbacks_total/ { s += $NF } END { printf "%.0f\n", s }'
}

# cpu_secs PID: the user + system CPU seconds it has used so far (/proc/PID/stat)
cpu_secs() {
	awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f\n", ($12 + $13) / hz }' "/proc/$1/stat"
}

# us_per A0 A1 N: (A1 - A0) seconds over N, in us, one decimal
us_per() {
	awk -v a="$1" -v b="$2" -v n="$3" 'BEGIN { if (n == 0) print "-"; else printf "%.1f\n", (b - a) * 1e6 / n }'
}

# busy A0 A1 T0: the share of one CPU used from A0 to A1 CPU seconds since time T0, in %
busy() {
	awk -v a="$1" -v b="$2" -v t="$3" -v n="$(now)" 'BEGIN { printf "%.0f%%\n", (b - a) * 100 / (n - t) }'
}

# last COLUMN: COLUMN of the last line of $tmp/results
last() {
	tail -n 1 "$tmp/results" | awk -v col="$1" '{ print $col }'
}

# wait_store ADDR PORT...: HITs to the divvyd at ADDR until the redis-servers at PORT... count
# EVALSHA calls for them (the store is up), 10 s at most
wait_store() {
	ws_addr=$1
	shift
	i=0
	while :; do
		c0=$(evalsha_calls "$@")
		bounded 5 "$bench" -q -n 16 -c 1 "$ws_addr" >/dev/null 2>&1 || true
		[ "$(evalsha_calls "$@")" -le "$c0" ] || return 0
		i=$((i + 1))
		if [ $i -ge 100 ]; then
			echo "run-bench.sh: divvyd ($ws_addr) makes no EVALSHA calls on redis $*; its log:" >&2
			cat "$tmp/divvyd.log" >&2
			exit 1
		fi
		sleep 0.1
	done
}

# start_cluster: three redis-servers with cluster-enabled (free ports, a free cluster-bus port
# each, no persistence), made a cluster of three primaries by redis-cli --cluster create;
# waits (30 s at most) until each says cluster_state:ok. Sets cluster_pids, cluster_ports.
start_cluster() {
	cluster_ports=""
	for i in 1 2 3; do
		cport=$(free_port)
		mkdir -p "$tmp/cluster-$i"
		redis-server --port "$cport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp/cluster-$i" \
			--daemonize no --logfile "$tmp/cluster-$i/redis.log" --cluster-enabled yes \
			--cluster-config-file nodes.conf --cluster-port "$(free_port)" --cluster-node-timeout 5000 &
		cluster_pids="$cluster_pids $!"
		cluster_ports="$cluster_ports $cport"
	done
	for cport in $cluster_ports; do
		i=0
		until [ "$(bounded 5 redis-cli -p "$cport" PING 2>/dev/null)" = PONG ]; do
			i=$((i + 1))
			[ $i -lt 100 ] || { echo "run-bench.sh: cluster node on port $cport did not start" >&2; exit 1; }
			sleep 0.1
		done
	done
	# shellcheck disable=SC2046 # one argument per node
	bounded 60 redis-cli --cluster create $(for cport in $cluster_ports; do echo "127.0.0.1:$cport"; done) \
		--cluster-replicas 0 --cluster-yes </dev/null >"$tmp/cluster-create.log" 2>&1 || {
		echo "run-bench.sh: redis-cli --cluster create failed:" >&2
		cat "$tmp/cluster-create.log" >&2
		exit 1
	}
	i=0
	for cport in $cluster_ports; do
		until bounded 5 redis-cli -p "$cport" CLUSTER INFO 2>/dev/null | grep -q '^cluster_state:ok'; do
			i=$((i + 1))
			[ $i -lt 300 ] || { echo "run-bench.sh: the cluster is not ok after 30 s" >&2; exit 1; }
			sleep 0.1
		done
	done
	cluster_url=redis+cluster://$(for cport in $cluster_ports; do printf '127.0.0.1:%s,' "$cport"; done | sed 's/,$//')
}

# measure_pair NAME C P ADDR1 ADDR2 ARGS...: C/2 connections to each address at once, one
# divvy-benchmark each (other seeds: other actors); appends "NAME C P rps p50 p99 replies" with
# req/s and replies summed, p50 and p99 the larger of the two
measure_pair() {
	name=$1 c=$2 pl=$3 a1=$4 a2=$5
	shift 5
	limit=$(awk -v d="$duration" -v w="$warmup" 'BEGIN { print d + w + 30 }')
	bounded "$limit" "$bench" -q -c $((c / 2)) -P "$pl" -d "$duration" -w "$warmup" --seed 1 "$@" "$a1" \
		>"$tmp/pair-1.out" 2>"$tmp/pair-1.err" &
	mp1=$!
	bounded "$limit" "$bench" -q -c $((c - c / 2)) -P "$pl" -d "$duration" -w "$warmup" --seed 2 "$@" "$a2" \
		>"$tmp/pair-2.out" 2>"$tmp/pair-2.err" &
	mp2=$!
	st=0
	wait "$mp1" || st=$?
	wait "$mp2" || st=$?
	pl1=$(grep '^RESULT ' "$tmp/pair-1.out" || true)
	pl2=$(grep '^RESULT ' "$tmp/pair-2.out" || true)
	if [ "$st" -ne 0 ] || [ -z "$pl1" ] || [ -z "$pl2" ]; then
		echo "run-bench.sh: divvy-benchmark failed ($name, $c,$pl):" >&2
		cat "$tmp/pair-1.err" "$tmp/pair-2.err" >&2
		exit 1
	fi
	rps=$(awk -v a="$(field rps "$pl1")" -v b="$(field rps "$pl2")" 'BEGIN { printf "%.0f\n", a + b }')
	p50=$(awk -v a="$(field p50_us "$pl1")" -v b="$(field p50_us "$pl2")" 'BEGIN { print (a > b ? a : b) }')
	p99=$(awk -v a="$(field p99_us "$pl1")" -v b="$(field p99_us "$pl2")" 'BEGIN { print (a > b ? a : b) }')
	echo "$name $c $pl $rps $p50 $p99" \
		"$(($(field ok_true "$pl1") + $(field ok_false "$pl1") + $(field ok_true "$pl2") + $(field ok_false "$pl2")))" \
		>>"$tmp/results"
	printf '  %-18s c=%-3s P=%-3s %10s req/s  p50 %7s us  p99 %7s us  (%s + %s req/s)\n' "$name" "$c" "$pl" \
		"$rps" "$p50" "$p99" "$(field rps "$pl1")" "$(field rps "$pl2")"
}

# note_calls NAME CALLS0 FALLBACKS0 HTTP_PORTS PORT...: how many EVALSHA calls the last run
# made per HIT answered (1/64 when divvyd packs 64 lone hits in a call, redis-store.h; 1 in a
# cluster: a call's keys share a slot) and how many of its HITs the divvyd instances at
# HTTP_PORTS (one word, ports separated by commas) answered by their fallback policy instead
# of Redis; appended to $tmp/calls
note_calls() {
	nc_name=$1 nc_c0=$2 nc_f0=$3 nc_http=$4
	shift 4
	nc=$(awk -v a="$nc_c0" -v b="$(evalsha_calls "$@")" -v n="$(last 7)" 'BEGIN { printf "%.3f\n", n ? (b - a) / n : 0 }')
	# shellcheck disable=SC2046 # the ports, one word each
	nf=$(($(fallbacks $(echo "$nc_http" | tr , ' ')) - nc_f0))
	echo "$nc_name $nc $nf" >>"$tmp/calls"
	echo "    EVALSHA calls per HIT answered: $nc; HITs answered by the fallback policy: $nf"
}

# same_run NAME: the last run's req/s and p99 ÷ the script's of the same run (s_rps, s_p99),
# appended to $tmp/ratios
same_run() {
	sr=$(ratio "$(last 4)" "$s_rps") srp=$(ratio "$(last 6)" "$s_p99")
	echo "$1 $sr $srp $(last 4) $(last 6)" >>"$tmp/ratios"
	echo "    ÷ the script in this run: req/s $sr, p99 $srp"
}

# counted H0: (redis_counted now - H0) per reply of the last run: 1.000 when every HIT was
# decided by Redis, less when some were answered by the local fallback
counted() {
	awk -v a="$1" -v b="$(redis_counted "$redis_port")" -v n="$(last 7)" 'BEGIN { printf "%.3f\n", n ? (b - a) / n : 0 }'
}

if [ "$redis_store" = yes ]; then
	echo
	echo "== The Redis store (issue #16): HIT, 16,16 over TCP, $actors actors =="
	: >"$tmp/calls"
	: >"$tmp/ratios"
	# A batch's deadline of 1 s, not the default 50 ms (BENCH_BACKEND_TIMEOUT overrides): on
	# a loaded machine some batches of 16,16 take longer (most in a cluster, where each lone
	# HIT is a call of its own), and HITs answered by the local fallback would be counted as
	# the store's. The fallbacks are counted and shown anyway.
	store_timeout=${BENCH_BACKEND_TIMEOUT:---backend-timeout=1000}
	start_redis
	d1_http=$(free_port)
	launch_divvyd "$divvyd" "$tmp/db-redis-1" "$sync" "redis://127.0.0.1:$redis_port" "$d1_http" "$store_timeout"
	d1_pid=$launched_pid d1_port=$divvyd_port store_pids=$launched_pid
	wait_for divvyd "$d1_pid" "tcp:127.0.0.1:$d1_port"
	d2_http=$(free_port)
	launch_divvyd "$divvyd" "$tmp/db-redis-2" "$sync" "redis://127.0.0.1:$redis_port" "$d2_http" "$store_timeout"
	d2_pid=$launched_pid d2_port=$divvyd_port store_pids="$store_pids $launched_pid"
	wait_for divvyd "$d2_pid" "tcp:127.0.0.1:$d2_port"
	wait_store "tcp:127.0.0.1:$d1_port" "$redis_port"
	wait_store "tcp:127.0.0.1:$d2_port" "$redis_port"
	tpl=$(python3 "$tmp/capture.py" "$redis_port" "$d1_port" rbprobe 10) || exit 1
	sha=$(redis-cli -p "$redis_port" -x SCRIPT LOAD <"$script")
	echo "  the script: $script, SHA1 $sha"
	echo "  a HIT's call, captured (tabs shown as |): $(echo "$tpl" | tr '\t' '|')"
	[ "$sha" = "$(echo "$tpl" | cut -f2)" ] ||
		echo "  WARNING: divvyd calls script $(echo "$tpl" | cut -f2), not $script's: the baseline runs divvyd's"
	start_cluster
	echo "  cluster: $cluster_url"
	d3_http=$(free_port)
	launch_divvyd "$divvyd" "$tmp/db-redis-cluster" "$sync" "$cluster_url" "$d3_http" "$store_timeout"
	d3_pid=$launched_pid d3_port=$divvyd_port store_pids="$store_pids $launched_pid"
	wait_for divvyd "$d3_pid" "tcp:127.0.0.1:$d3_port"
	# shellcheck disable=SC2086 # the ports, one word each
	wait_store "tcp:127.0.0.1:$d3_port" $cluster_ports
	run=1
	while [ $run -le "$runs" ]; do
		echo "run $run of $runs:"
		r0=$(cpu_secs "$redis_pid") t0=$(now)
		measure script 16 16 -k "$actors" --redis -r "$tpl" "tcp:127.0.0.1:$redis_port"
		s_rps=$(last 4) s_p99=$(last 6)
		echo "script-of $s_rps $s_p99" >>"$tmp/ratios"
		r1=$(cpu_secs "$redis_pid")
		echo "    CPU per HIT: redis $(us_per "$r0" "$r1" "$(last 7)") us (busy $(busy "$r0" "$r1" "$t0"))"
		r0=$(cpu_secs "$redis_pid") a0=$(cpu_secs "$d1_pid") c0=$(evalsha_calls "$redis_port") t0=$(now)
		f0=$(fallbacks "$d1_http")
		h0=$(redis_counted "$redis_port")
		measure redis-store 16 16 -k "$actors" "tcp:127.0.0.1:$d1_port"
		r1=$(cpu_secs "$redis_pid") a1=$(cpu_secs "$d1_pid")
		echo "    CPU per HIT: redis $(us_per "$r0" "$r1" "$(last 7)") us (busy $(busy "$r0" "$r1" "$t0"))," \
			"divvyd $(us_per "$a0" "$a1" "$(last 7)") us (busy $(busy "$a0" "$a1" "$t0"))"
		note_calls redis-store "$c0" "$f0" "$d1_http" "$redis_port"
		same_run redis-store
		echo "    counted in redis per HIT answered: $(counted "$h0")"
		r0=$(cpu_secs "$redis_pid") c0=$(evalsha_calls "$redis_port") t0=$(now)
		h0=$(redis_counted "$redis_port") f0=$(fallbacks "$d1_http" "$d2_http")
		measure_pair fleet 16 16 "tcp:127.0.0.1:$d1_port" "tcp:127.0.0.1:$d2_port" -k "$actors"
		echo "    redis busy $(busy "$r0" "$(cpu_secs "$redis_pid")" "$t0")"
		note_calls fleet "$c0" "$f0" "$d1_http,$d2_http" "$redis_port"
		same_run fleet
		echo "    counted in redis per HIT answered: $(counted "$h0")"
		# shellcheck disable=SC2086
		c0=$(evalsha_calls $cluster_ports) f0=$(fallbacks "$d3_http") a0=$(cpu_secs "$d3_pid") t0=$(now)
		measure cluster 16 16 -k "$actors" "tcp:127.0.0.1:$d3_port"
		a1=$(cpu_secs "$d3_pid")
		echo "    CPU per HIT: divvyd $(us_per "$a0" "$a1" "$(last 7)") us (busy $(busy "$a0" "$a1" "$t0"))"
		# shellcheck disable=SC2086
		note_calls cluster "$c0" "$f0" "$d3_http" $cluster_ports
		same_run cluster
		run=$((run + 1))
	done
	for p in $store_pids; do
		stop "$p"
	done
	store_pids=""
	stop "$redis_pid"
	redis_pid=""
	for p in $cluster_pids; do
		stop "$p"
	done
	cluster_pids=""

	# calls NAME: the EVALSHA calls per HIT of NAME's runs, and their HITs answered by a fallback
	calls() {
		awk -v n="$1" '$1 == n { c = c sep $2; f += $3; sep = ", " }
			END { printf "EVALSHA calls per HIT %s; %d HITs by the fallback policy\n", c, f }' "$tmp/calls"
	}
	# runs NAME COLUMN: NAME's per-run values of COLUMN in $tmp/ratios (2 ratio, 3 p99 ratio,
	# 4 req/s, 5 p99 us), in run order, separated by " / "
	runs_of() {
		awk -v n="$1" -v col="$2" '$1 == n { v = v sep $col; sep = " / " } END { print v }' "$tmp/ratios"
	}
	# mid NAME: the median of NAME's same-run ratios
	mid() {
		awk -v n="$1" '$1 == n { print $2 }' "$tmp/ratios" | sort -g | awk '{ v[NR] = $1 }
			END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2];
			else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
	}
	k=$(short "$actors")
	for m in redis-store:"divvyd on Redis":">= 0.9" fleet:"two divvyd on one Redis (sum)":"- -" \
		cluster:"divvyd on a 3-primary Cluster":"- -"; do
		n=${m%%:*} rest=${m#*:}
		what=${rest%%:*} target=${rest#*:}
		# shellcheck disable=SC2086 # target: "OP LIMIT", two words
		row "$k, 16×16: $what ÷ the script on redis, same run" "$(mid "$n")" $target \
			"runs: $(runs_of "$n" 2) (req/s $(runs_of "$n" 4) ÷ $(runs_of script-of 2)); p99 $(runs_of "$n" 5) us ÷ $(runs_of script-of 3) us = $(runs_of "$n" 3); $(calls "$n")"
	done
fi

for n in $big_sizes; do
	big_point "$n"
done

echo
echo "Summary ($runs run(s) of ${duration} s, medians; ratios are from this run):"
echo
echo "| measure | figure | target | verdict | detail |"
echo "|---|---:|---|---|---|"
cat "$tmp/summary"
