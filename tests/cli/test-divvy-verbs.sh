#!/bin/sh
# SPDX-License-Identifier: MIT
# The divvy command's version 2 subcommands (take, peek, charge, refund, reset, explain,
# hello) and --wait, against a scripted fake server (tests/cli/fake-server.py): the request
# lines it sends, byte for byte, what it prints and its exit status. Run by `make check`,
# which exports top_srcdir and top_builddir.
set -u

top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
divvy=$top_builddir/src/divvy
fake=$top_srcdir/tests/cli/fake-server.py

if [ ! -x "$divvy" ]; then
	echo "$divvy not built" >&2
	exit 99
fi
command -v python3 >/dev/null || exit 77

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-divvy-verbs.XXXXXX") || exit 99
fake_pid=
made_run_dir=false
cleanup() {
	[ -n "$fake_pid" ] && kill "$fake_pid" 2>/dev/null
	$made_run_dir && rmdir /run/divvyd 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

. "$top_srcdir/tests/shell-checks.sh"

sock=$tmp/fake.sock
HELLO_OK='OK proto=2 server=divvyd/0.3.0 verbs=HIT,HELLO,TAKE,PEEK,CHARGE,REFUND,RESET,EXPLAIN'
TAB=$(printf '\t')

# serve STEP...: starts the fake with one "REQUEST<TAB>REPLY" step per argument.
serve() {
	: >"$tmp/script"
	for step in "$@"; do
		printf '%s\n' "$step" >>"$tmp/script"
	done
	rm -f "$sock" "$tmp/log"
	python3 "$fake" "$sock" "$tmp/script" "$tmp/log" &
	fake_pid=$!
	i=0
	while [ ! -S "$sock" ] && [ $i -lt 200 ]; do # at most 10 s
		sleep 0.05
		i=$((i + 1))
	done
}

# finished: waits (at most 10 s) for the fake to end after its last step; false if it did not
# (the command sent less than the script expects), then stops it.
finished() {
	i=0
	while kill -0 "$fake_pid" 2>/dev/null && [ $i -lt 200 ]; do
		sleep 0.05
		i=$((i + 1))
	done
	if kill -0 "$fake_pid" 2>/dev/null; then
		kill "$fake_pid"
		wait "$fake_pid" 2>/dev/null
		fake_pid=
		return 1
	fi
	wait "$fake_pid" 2>/dev/null
	fake_pid=
	! grep -q '^MISMATCH' "$tmp/log"
}

# check DESCRIPTION EXPECTED_STATUS EXPECTED_STDOUT [EXPECTED_LOG]: checks the last run
# (its status in $status) and, after the fake ended, its log.
check() {
	what=$1
	ok=true
	if [ "$status" -ne "$2" ]; then
		echo "    exit status $status, expected $2" >>"$tmp/err"
		ok=false
	fi
	if [ "$(cat "$tmp/out")" != "$3" ]; then
		printf '    expected stdout: %s\n' "$3" >>"$tmp/err"
		ok=false
	fi
	if [ $# -ge 4 ]; then
		if ! finished; then
			echo "    the fake server did not finish its script" >>"$tmp/err"
			ok=false
		fi
		if [ "$(cat "$tmp/log" 2>/dev/null)" != "$4" ]; then
			printf '    server log:\n%s\n    expected:\n%s\n' "$(cat "$tmp/log")" "$4" >>"$tmp/err"
			ok=false
		fi
	fi
	if $ok; then pass "$what"; else fail "$what"; fi
}

# stderr_has TEXT DESCRIPTION: checks the last run's stderr.
stderr_has() {
	if grep -qF -- "$1" "$tmp/err"; then pass "$2"; else fail "$2"; fi
}

run() {
	"$divvy" --socket="$sock" --timeout=10 "$@" >"$tmp/out" 2>"$tmp/err"
	status=$?
}

nl='
'

# ---- every subcommand -----------------------------------------------------------------------

serve "HELLO$TAB$HELLO_OK" "TAKE 3 method=GET path=/x$TAB""OK allowed=true credit=7 limit=10 reset=42 retry=0 rule=cookies"
run take 3 method=GET path=/x
check "take N: HELLO first, then TAKE; prints the fields; exit 0" 0 \
	"allowed=true credit=7 limit=10 reset=42 retry=0 rule=cookies" \
	"CONNECT${nl}HELLO${nl}TAKE 3 method=GET path=/x"

serve "HELLO$TAB$HELLO_OK" "TAKE 1 ip=\"1 2\"$TAB""OK allowed=false credit=0 limit=10 reset=5 retry=5 rule=#2 future=x"
run take 1 "ip=1 2"
check "take denied: exit 1, quoted value, unknown reply field ignored" 1 \
	"allowed=false credit=0 limit=10 reset=5 retry=5 rule=#2" "CONNECT${nl}HELLO${nl}TAKE 1 ip=\"1 2\""

serve "HELLO$TAB$HELLO_OK" "TAKE 2 a=b$TAB""OK allowed=true credit=7 limit=10 reset=42 retry=0 rule=r\"x"
run --json take 2 a=b
check "take --json" 0 '{"allowed":true,"credit":7,"limit":10,"reset":42,"retry":0,"rule":"r\"x"}' \
	"CONNECT${nl}HELLO${nl}TAKE 2 a=b"

serve "HELLO$TAB$HELLO_OK" "PEEK 1 a=b$TAB""OK allowed=true credit=1 limit=1 reset=1 retry=0 rule=r"
run peek a=b
check "peek without N sends PEEK 1" 0 "allowed=true credit=1 limit=1 reset=1 retry=0 rule=r" \
	"CONNECT${nl}HELLO${nl}PEEK 1 a=b"

serve "HELLO$TAB$HELLO_OK" "PEEK 0$TAB""OK allowed=false credit=0 limit=0 reset=0 retry=-1 rule=deny"
run peek 0
check "peek 0; retry=-1 printed" 1 "allowed=false credit=0 limit=0 reset=0 retry=-1 rule=deny" \
	"CONNECT${nl}HELLO${nl}PEEK 0"

serve "HELLO$TAB$HELLO_OK" "CHARGE 9007199254740991 a=b$TAB""OK allowed=false credit=0 limit=5 reset=9 retry=9 rule=r"
run charge 9007199254740991 a=b
check "charge N: the largest count; did not fit: exit 1" 1 \
	"allowed=false credit=0 limit=5 reset=9 retry=9 rule=r" "CONNECT${nl}HELLO${nl}CHARGE 9007199254740991 a=b"

serve "HELLO$TAB$HELLO_OK" "REFUND 2 a=b$TAB""ERR forbidden \"REFUND and RESET need an admin listener\""
run refund 2 a=b
check "refund off an admin listener: the server's error, exit 2" 2 "" "CONNECT${nl}HELLO${nl}REFUND 2 a=b"
stderr_has 'forbidden: REFUND and RESET need an admin listener' "refund: the reason on stderr"

serve "HELLO$TAB$HELLO_OK" "RESET a=b$TAB""OK reset=3"
run reset a=b
check "reset prints the number of counters" 0 "reset=3" "CONNECT${nl}HELLO${nl}RESET a=b"

serve "HELLO$TAB$HELLO_OK" "RESET$TAB""OK reset=0"
run --json reset
check "reset --json" 0 '{"reset":0}' "CONNECT${nl}HELLO${nl}RESET"

serve "HELLO$TAB$HELLO_OK" "EXPLAIN ip=1.2.3.4$TAB""OK rule=cookies index=4 policy=stop actor=\"a\\\"b\\\\c\\td\\x01\" algorithm=token-bucket canaries=try,#2 continue=-"
run explain ip=1.2.3.4
check "explain: fields, actor escaped as the server does" 0 \
	'rule=cookies index=4 policy=stop actor="a\"b\\c\td\x01" algorithm=token-bucket canaries=try,#2 continue=-' \
	"CONNECT${nl}HELLO${nl}EXPLAIN ip=1.2.3.4"

serve "HELLO$TAB$HELLO_OK" "EXPLAIN$TAB""OK rule=#0 index=0 policy=stop actor=- algorithm=fixed-window canaries=- continue=a,b"
run --json explain
check "explain --json, no actorField" 0 \
	'{"rule":"#0","index":0,"policy":"stop","actor":null,"actor_cut":false,"algorithm":"fixed-window","canaries":"","continue":"a,b"}' \
	"CONNECT${nl}HELLO${nl}EXPLAIN"

serve "HELLO$TAB$HELLO_OK"
run hello
check "hello" 0 "proto=2 server=divvyd/0.3.0" "CONNECT${nl}HELLO"

serve "HIT a=b${TAB}OK true 1 60"
run hit a=b
check "hit is unchanged: no HELLO" 0 "true 1 60" "CONNECT${nl}HIT a=b"

# An old server (divvy, older divvyd): HELLO is an unknown command.
serve "HELLO${TAB}ERR unknown-command \"Unrecognized command: HELLO\""
run take 1 a=b
check "old server: exit 2" 2 "" "CONNECT${nl}HELLO"
stderr_has 'does not speak divvy protocol version 2' "old server: a clear message"

# ---- --wait ----------------------------------------------------------------------------------

serve "HELLO$TAB$HELLO_OK" \
	"TAKE 2 a=b$TAB""OK allowed=false credit=0 limit=2 reset=30 retry=1 rule=r" \
	"TAKE 2 a=b$TAB""OK allowed=true credit=0 limit=2 reset=1 retry=0 rule=r"
run --wait=5 take 2 a=b
check "take --wait=5: sleeps the retry-after (not reset), tries again on the same connection" 0 \
	"allowed=true credit=0 limit=2 reset=1 retry=0 rule=r" "CONNECT${nl}HELLO${nl}TAKE 2 a=b${nl}TAKE 2 a=b"

serve "HELLO$TAB$HELLO_OK" "TAKE 5 a=b$TAB""OK allowed=false credit=2 limit=2 reset=0 retry=-1 rule=r"
run --wait take 5 a=b
check "take --wait, retry=-1: no waiting, exit 1" 1 "allowed=false credit=2 limit=2 reset=0 retry=-1 rule=r" \
	"CONNECT${nl}HELLO${nl}TAKE 5 a=b"
stderr_has 'can never pass' "take --wait, retry=-1: says why"

# -q: a denial that can never pass is still a denial (exit 1), and -q prints nothing: a cron
# job mails whatever a command prints
serve "HELLO$TAB$HELLO_OK" "TAKE 5 a=b$TAB""OK allowed=false credit=2 limit=2 reset=0 retry=-1 rule=r"
run -q --wait take 5 a=b
if [ -s "$tmp/err" ]; then quiet_err=$(cat "$tmp/err"); else quiet_err=; fi
check "take -q --wait, retry=-1: exit 1, nothing on stdout" 1 "" "CONNECT${nl}HELLO${nl}TAKE 5 a=b"
if [ -z "$quiet_err" ]; then pass "take -q --wait, retry=-1: nothing on stderr"; else
	fail "take -q --wait, retry=-1: nothing on stderr (got: $quiet_err)"; fi

serve "HELLO$TAB$HELLO_OK" \
	"TAKE 1$TAB""OK allowed=false credit=0 limit=1 reset=1 retry=1 rule=r" \
	"TAKE 1$TAB""OK allowed=false credit=0 limit=1 reset=1 retry=1 rule=r"
run --wait --tries=2 take 1
check "take --wait --tries=2: two requests, then exit 1" 1 "allowed=false credit=0 limit=1 reset=1 retry=1 rule=r" \
	"CONNECT${nl}HELLO${nl}TAKE 1${nl}TAKE 1"

serve "HELLO$TAB$HELLO_OK" "TAKE 1$TAB""OK allowed=false credit=0 limit=1 reset=30 retry=30 rule=r"
run --wait=5 take 1
check "take --wait=5 with retry=30: gives up at once" 1 "allowed=false credit=0 limit=1 reset=30 retry=30 rule=r" \
	"CONNECT${nl}HELLO${nl}TAKE 1"

# A retry-after whose microseconds do not fit in 64 bits (a server other than divvyd may say
# anything up to 2^63 - 1 seconds): the product wrapped to 0.45 s, a retry within the limit.
serve "HELLO$TAB$HELLO_OK" "TAKE 1$TAB""OK allowed=false credit=0 limit=1 reset=18446744073710 retry=18446744073710 rule=r"
run --wait=5 take 1
check "take --wait=5 with a retry of 2^64 us: gives up at once" 1 \
	"allowed=false credit=0 limit=1 reset=18446744073710 retry=18446744073710 rule=r" "CONNECT${nl}HELLO${nl}TAKE 1"

# ---- arguments refused before connecting -------------------------------------------------------

rm -f "$sock"
for args in "take" "take a=b" "take 0" "take -1" "take 1x" "take 9007199254740992" "charge" "refund 0" \
	"peek -1" "hello a=b" "--wait peek 1" "--wait charge 1" "--tries=0 take 1" "--tries take 1" "explain 5" \
	"--tries=2 take 1" "--wait --tries=2 hit" "--wait --tries=2 peek 1"; do
	# shellcheck disable=SC2086 # word splitting wanted
	run $args
	if [ "$status" -eq 2 ] && [ -s "$tmp/err" ] && [ ! -s "$tmp/out" ] && ! grep -q 'connect' "$tmp/err"; then
		pass "refused: divvy $args"
	else
		echo "    exit status $status" >>"$tmp/err"
		fail "refused: divvy $args"
	fi
done

# ---- keys starting with '@' ----------------------------------------------------------------------

# divvyd reads an unquoted "@..." after the count as a client timestamp (ERR bad-time): the key
# goes out quoted on the new verbs, as it is on HIT unquoted (HIT has no timestamp).
serve "HELLO$TAB$HELLO_OK" "TAKE 1 \"@user\"=x$TAB""OK allowed=true credit=4 limit=5 reset=60 retry=0 rule=at"
run take 1 @user=x
check "take 1 @user=x: the key quoted" 0 "allowed=true credit=4 limit=5 reset=60 retry=0 rule=at" \
	"CONNECT${nl}HELLO${nl}TAKE 1 \"@user\"=x"
serve "HELLO$TAB$HELLO_OK" "EXPLAIN \"@user\"=x$TAB""OK rule=at index=0 policy=stop actor=\"x\" algorithm=fixed-window canaries=- continue=-"
run explain @user=x
check "explain @user=x: the key quoted" 0 'rule=at index=0 policy=stop actor="x" algorithm=fixed-window canaries=- continue=-' \
	"CONNECT${nl}HELLO${nl}EXPLAIN \"@user\"=x"

# ---- an invalid address from $DIVVY_ADDRESS ------------------------------------------------------

# The message names the variable (the operator passed no address) and the forms expected,
# not "Invalid argument".
DIVVY_ADDRESS='tcp:::1' "$divvy" hit a=b >"$tmp/out" 2>"$tmp/err"
status=$?
if [ "$status" -eq 2 ] && [ ! -s "$tmp/out" ]; then pass "bad \$DIVVY_ADDRESS: exit 2"; else fail "bad \$DIVVY_ADDRESS: exit 2 (got $status)"; fi
stderr_has "Invalid address 'tcp:::1' (from \$DIVVY_ADDRESS): expected unix:PATH" "bad \$DIVVY_ADDRESS: named, with the forms"
"$divvy" --address='localhost:99999' hit a=b >"$tmp/out" 2>"$tmp/err"
stderr_has "Invalid address 'localhost:99999': expected" "bad --address: the forms, no \$DIVVY_ADDRESS"
if grep -q 'DIVVY_ADDRESS' "$tmp/err"; then fail "bad --address: does not blame \$DIVVY_ADDRESS"; else pass "bad --address: does not blame \$DIVVY_ADDRESS"; fi

# ---- the packaged socket in a directory the user cannot search --------------------------------

# /run/divvyd is 0750: for a user outside the divvy group, access() says EACCES, not ENOENT.
# The command fell back to 127.0.0.1:8321 and reported "connection refused" there; it must try
# the socket and report "Permission denied". Only as root on a machine without /run/divvyd
# (nothing installed), where the directory can be made and removed; skipped otherwise.
if [ "$(id -u)" -eq 0 ] && [ ! -e /run/divvyd ] && command -v setpriv >/dev/null &&
	mkdir -m 0750 /run/divvyd 2>/dev/null; then
	made_run_dir=true
	env -u DIVVY_ADDRESS setpriv --reuid=65534 --regid=65534 --clear-groups "$divvy" hit a=b >"$tmp/out" 2>"$tmp/err"
	status=$?
	rmdir /run/divvyd
	made_run_dir=false
	if [ "$status" -eq 2 ] &&
		grep -qxF 'divvy: Failed to connect to unix:/run/divvyd/divvyd.sock: Permission denied' "$tmp/err"; then
		pass "packaged socket not searchable: tried, Permission denied"
	else
		fail "packaged socket not searchable: tried, Permission denied (status $status)"
	fi
else
	echo "skipped: packaged socket not searchable (needs root, setpriv and no /run/divvyd)"
fi

finish
