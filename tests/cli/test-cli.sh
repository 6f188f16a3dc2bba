#!/bin/sh
# SPDX-License-Identifier: MIT
# divvyd's command line: --check-config and --dump-config on the examples and a
# broken fixture, --help, --version, a bad option. Run by `make check`, which
# exports top_srcdir and top_builddir.
set -u

top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
divvyd=$top_builddir/src/divvyd
examples=$top_srcdir/examples
data=$top_srcdir/tests/data

if [ ! -x "$divvyd" ]; then
	echo "$divvyd not built" >&2
	exit 99
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-cli.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

. "$top_srcdir/tests/shell-checks.sh"

# run EXPECTED_STATUS DESCRIPTION ARGS...: runs divvyd, output in $tmp/out and $tmp/err.
run() {
	expected=$1
	what=$2
	shift 2
	"$divvyd" "$@" >"$tmp/out" 2>"$tmp/err"
	status=$?
	if [ "$status" -eq "$expected" ]; then
		return 0
	fi
	echo "    exit status $status, expected $expected" >>"$tmp/err"
	fail "$what"
	return 1
}

# has FILE LITERAL_TEXT: true if FILE contains the text as a whole line.
has_line() {
	grep -qxF -- "$2" "$1"
}

for f in example-config.ini example-config.json canary-config.ini canary-config.json; do
	case $f in
	example-*) summary="5 rules (0 canary, 3 with actor, 2 labelled)" ;;
	*) summary="4 rules (1 canary, 2 with actor, 1 labelled)" ;;
	esac
	if run 0 "--check-config $f" --check-config "$examples/$f"; then
		if has_line "$tmp/out" "$examples/$f: OK, $summary" && [ ! -s "$tmp/err" ]; then
			pass "--check-config $f"
		else
			fail "--check-config $f: expected the line '$examples/$f: OK, $summary'"
		fi
	fi
done

if run 0 "-n example-config.ini" -n "$examples/example-config.ini"; then
	pass "-n is --check-config"
fi

# A broken file: exit 1, every message on stderr as FILE:LINE: reason.
bad=$data/duplicate-key.ini
if run 1 "--check-config on a broken file" --check-config "$bad"; then
	if has_line "$tmp/err" "$bad:4: rule [method=GET] sets creditLimit twice (first on line 2)" &&
		[ ! -s "$tmp/out" ]; then
		pass "--check-config on a broken file reports FILE:LINE"
	else
		fail "--check-config on a broken file: no '$bad:4: ...' message"
	fi
fi

bad=$data/syntax.ini
if run 1 "--check-config syntax.ini" --check-config "$bad"; then
	n=$(grep -c '\.ini:[0-9][0-9]*: ' "$tmp/err")
	if [ "$n" -eq 11 ]; then
		pass "--check-config reports all 11 errors of syntax.ini"
	else
		fail "--check-config syntax.ini: $n FILE:LINE messages, expected 11"
	fi
fi

if run 1 "--check-config on a missing file" --check-config "$tmp/missing.ini"; then
	if has_line "$tmp/err" "$tmp/missing.ini: cannot open: No such file or directory"; then
		pass "--check-config on a missing file"
	else
		fail "--check-config on a missing file: unexpected message"
	fi
fi

# --check-config --compat=divvy (issue #16): a config divvy 1.7 decides alike passes; one
# it would not is refused, a message per rule on stderr, exit 1.
for f in divvy-compat.ini divvy-compat.json; do
	if run 0 "--compat=divvy $f" --check-config --compat=divvy "$data/$f" &&
		has_line "$tmp/out" "$data/$f: OK, 6 rules (1 canary, 2 with actor, 1 labelled)"; then
		pass "--check-config --compat=divvy $f"
	fi
done
if run 1 "--compat=divvy on a config divvy decides otherwise" -n --compat=divvy "$examples/canary-config.ini"; then
	if has_line "$tmp/err" "$examples/canary-config.ini:12: rule [ip=* method=GET path=/pantry/cookies/*] is not divvy-compatible: ip=* (divvy 1.7 also matches requests without ip)" &&
		[ "$(wc -l <"$tmp/err")" -eq 2 ] && [ ! -s "$tmp/out" ]; then
		pass "--compat=divvy refuses canary-config.ini, a message per rule"
	else
		fail "--compat=divvy on canary-config.ini: unexpected output"
	fi
fi
if run 2 "--compat=node exits 2" --check-config --compat=node "$data/divvy-compat.ini"; then
	pass "--compat=node exits 2"
fi
if run 2 "--compat without --check-config exits 2" --compat=divvy "$data/divvy-compat.ini"; then
	pass "--compat without --check-config exits 2"
fi

# The Redis store's options (issue #16): usage errors exit 2 naming the option; a URL the
# store refuses stops the start with its reason, exit 1.
for bad in "--store=memcached://x" "--on-backend-error=maybe" "--backend-timeout=0" "--resp=maybe" \
	"--store-password-file=$tmp/missing"; do
	if run 2 "$bad exits 2" --allow-root "$bad" "$examples/example-config.ini"; then
		opt=${bad%%=*}
		if grep -q -- "$opt" "$tmp/err"; then
			pass "$bad exits 2 naming $opt"
		else
			fail "$bad: the message does not name $opt"
		fi
	fi
done
if run 1 "--store with a bad port" --allow-root --db "$tmp/db" --listen "unix:$tmp/s" \
	--store=redis://127.0.0.1:99999 "$examples/example-config.ini"; then
	if grep -q "redis://127.0.0.1:99999" "$tmp/err" && grep -qi "port" "$tmp/err"; then
		pass "--store with a bad port: refused at start, with the reason"
	else
		fail "--store with a bad port: no reason given"
	fi
fi
# --allow-client-limits with --store: refused before anything starts, naming both options; and
# --help says so.
if run 1 "--allow-client-limits with --store" --allow-root --db "$tmp/db" --listen "unix:$tmp/s" \
	--allow-client-limits --store=redis://127.0.0.1:6379 "$examples/example-config.ini"; then
	if grep -q -- "--allow-client-limits needs the local store, not --store" "$tmp/err"; then
		pass "--allow-client-limits with --store: refused, naming both"
	else
		fail "--allow-client-limits with --store: the message does not name both options"
	fi
fi
if run 0 "--help on --allow-client-limits" --help; then
	if tr -s ' \n' ' ' <"$tmp/out" | grep -q -- "--allow-client-limits Accept .*refused with --store"; then
		pass "--help: --allow-client-limits is refused with --store"
	else
		fail "--help does not say --allow-client-limits is refused with --store"
	fi
fi

# --dump-config: JSON that loads again and dumps to the same bytes.
for f in example-config.ini canary-config.ini; do
	base=${f%.ini}
	if run 0 "--dump-config $f" --dump-config "$examples/$f"; then
		cp "$tmp/out" "$tmp/$base.json"
		if run 0 "--check-config on the dump of $f" --check-config "$tmp/$base.json" &&
			run 0 "--dump-config of the dump of $f" --dump-config "$tmp/$base.json"; then
			if cmp -s "$tmp/out" "$tmp/$base.json"; then
				pass "--dump-config $f round trip"
			else
				diff "$tmp/$base.json" "$tmp/out" >"$tmp/err"
				fail "--dump-config $f: the dump of the dump differs"
			fi
		fi
	fi
done

# The INI and JSON examples describe the same rules: same dump.
if run 0 "--dump-config example-config.json" --dump-config "$examples/example-config.json"; then
	if cmp -s "$tmp/out" "$tmp/example-config.json"; then
		pass "example-config.ini and .json dump identically"
	else
		diff "$tmp/example-config.json" "$tmp/out" >"$tmp/err"
		fail "example-config.ini and .json dump differently"
	fi
fi

if run 0 "--help" --help; then
	if grep -q "^Usage: divvyd" "$tmp/out"; then
		pass "--help"
	else
		fail "--help: no usage line"
	fi
fi
if run 0 "--version" --version; then
	if grep -q "^divvyd [0-9]" "$tmp/out"; then
		pass "--version"
	else
		fail "--version: no 'divvyd VERSION' line"
	fi
fi
if run 2 "an unknown option exits 2" --no-such-option; then
	pass "an unknown option exits 2"
fi
if run 2 "no CONFIG argument exits 2" --check-config; then
	pass "no CONFIG argument exits 2"
fi

# Option values: a bad one exits 2 and names the option; a good one is taken (options are
# read before --check-config runs).
for arg in --checkpoint-interval=abc --checkpoint-interval=0 --checkpoint-interval=31536001 \
	--checkpoint-interval=-1 --checkpoint-journal-max=0 --checkpoint-journal-max=1x \
	--checkpoint-journal-max=99999999999999999999 --journal-segment-size=1 \
	--journal-segment-size=65535 --journal-segment-size=2G --journal-segment-size=+64K \
	--map-size=0 --map-size=1KB --map-size=K --map-size=0x10 --output-limit=1023 \
	--sync-interval=1.5 --sync-interval=' 1' --max-connections=007x --idle-timeout=-0 \
	--statsd-port=65536 --http-port=99999999999999999999 --statsd-interval=9 \
	--client-time-max-age=-1 --client-time-max-age=1s --client-time-max-age=31536001 \
	--checkpoint-format=LMDB --checkpoint-format=; do
	if run 2 "$arg exits 2" "$arg" --check-config "$examples/example-config.ini"; then
		if grep -q "^divvyd: invalid value for ${arg%%=*}[ :]" "$tmp/err"; then
			pass "$arg exits 2"
		else
			fail "$arg: no 'invalid value for ${arg%%=*}' on stderr"
		fi
	fi
done
for arg in --checkpoint-interval=1 --checkpoint-interval=31536000 --checkpoint-journal-max=1 \
	--checkpoint-journal-max=64K --journal-segment-size=64K --journal-segment-size=1G \
	--journal-segment-size=0065536 --map-size=16m --sync-interval=007 --http-port=0 \
	--client-time-max-age=0 --client-time-max-age=31536000 --checkpoint-format=lmdb \
	--checkpoint-format=snapshot; do
	if run 0 "$arg is taken" "$arg" --check-config "$examples/example-config.ini"; then
		pass "$arg is taken"
	fi
done

finish
