# SPDX-License-Identifier: MIT
# Sourced by the shell tests (tests/cli/test-cli.sh, tests/check-layout.sh, bench/test-benchmark.sh): counting checks
# and the closing "N passed, N failed" line. The caller sets $tmp; a failure prints the
# $tmp/out and $tmp/err of the command that was checked.

passed=0
failed=0

pass() {
	passed=$((passed + 1))
	echo "ok: $1"
}

fail() {
	failed=$((failed + 1))
	echo "FAIL: $1"
	for f in "$tmp/out" "$tmp/err"; do
		[ -s "$f" ] && sed 's/^/    /' "$f"
	done
}

# Prints the summary line; the exit status is the caller's to take from it.
finish() {
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
}
