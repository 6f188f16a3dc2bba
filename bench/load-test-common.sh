# SPDX-License-Identifier: MIT
# Sourced by the smoke tests of the load generators (bench/test-benchmark.sh,
# bench/test-grpc-load.sh): their set-up, the wait for divvyd, and expect, the check of one
# run's exit status and RESULT line (counts only, never timings). Run by `make check`, which
# exports top_srcdir and top_builddir.

top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
divvyd=$top_builddir/src/divvyd

# load_test_init NAME PROGRAM: divvyd and PROGRAM ($load, the program under test) built, or exit
# 99; $tmp a new directory, removed on exit with the divvyd the caller starts ($pid); a free
# loopback $port; $allow_root for divvyd; the counting checks of tests/shell-checks.sh.
load_test_init() {
	load=$2
	for p in "$divvyd" "$load"; do
		if [ ! -x "$p" ]; then
			echo "$p not built" >&2
			exit 99
		fi
	done
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || exit 99
	pid=""
	trap load_test_cleanup EXIT
	trap 'exit 1' INT TERM
	. "$top_srcdir/tests/shell-checks.sh"
	# A free loopback port: bind port 0 (python3 is a test dependency already).
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])') || exit 99
	# divvyd refuses to run as root unless told (CI runs the tests as root).
	allow_root=
	[ "$(id -u)" -eq 0 ] && allow_root=--allow-root
}

load_test_cleanup() {
	if [ -n "$pid" ]; then
		kill "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	fi
	rm -rf "$tmp"
}

# load_test_ready COMMAND...: divvyd ($pid, its log in $tmp/divvyd.log) is ready when COMMAND,
# one request, gets through (bounded: 100 tries, 10 s); exit 99 if it does not.
load_test_ready() {
	i=0
	until "$@" >/dev/null 2>&1; do
		i=$((i + 1))
		if [ $i -ge 100 ] || ! kill -0 "$pid" 2>/dev/null; then
			echo "divvyd did not start:" >&2
			cat "$tmp/divvyd.log" >&2
			exit 99
		fi
		sleep 0.1
	done
}

# field NAME: the value of NAME=... in the RESULT line of $tmp/out.
field() {
	sed -n 's/^RESULT .* '"$1"'=\([^ ]*\).*$/\1/p' "$tmp/out"
}

# expect WHAT STATUS FIELD=VALUE... -- ARGS...: runs $load ARGS (bounded: 60 s), checks its exit
# status, its one RESULT line and the fields in it.
expect() {
	what=$1
	want_status=$2
	shift 2
	checks=""
	while [ "$1" != "--" ]; do
		checks="$checks $1"
		shift
	done
	shift
	timeout 60 "$load" "$@" >"$tmp/out" 2>"$tmp/err"
	status=$?
	if [ "$status" -ne "$want_status" ]; then
		echo "    exit status $status, expected $want_status" >>"$tmp/err"
		fail "$what"
		return
	fi
	if [ "$(grep -c '^RESULT ' "$tmp/out")" -ne 1 ]; then
		echo "    expected exactly one RESULT line" >>"$tmp/err"
		fail "$what"
		return
	fi
	for c in $checks; do
		name=${c%%=*}
		want=${c#*=}
		got=$(field "$name")
		if [ "$got" != "$want" ]; then
			echo "    $name=$got, expected $want" >>"$tmp/err"
			fail "$what"
			return
		fi
	done
	pass "$what"
}
