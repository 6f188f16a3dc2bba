#!/bin/sh
# SPDX-License-Identifier: MIT
# Builds the libFuzzer targets (clang, --enable-fuzzer: ASan + UBSan + coverage) in a build
# directory of their own and runs each for a bounded time on a copy of its seed corpus.
# Fails if any target crashes, leaks, times out on an input or breaks an invariant; the
# reproducer is left in the artifacts directory and printed.
#
# Usage: tests/fuzz/run-fuzzers.sh [SECONDS_PER_TARGET] [TARGET...]
#   SECONDS_PER_TARGET  default $FUZZ_SECONDS, else 60
#   TARGET              fuzz-protocol fuzz-config-ini fuzz-config-json fuzz-config-yaml fuzz-connection fuzz-resp fuzz-client-limits fuzz-http-api fuzz-snapshot (default: all)
# Environment:
#   FUZZ_BUILDDIR       build directory (default: a new temporary one, removed unless FUZZ_KEEP is set)
#   FUZZ_ARTIFACTS      where crash reproducers go (default: $FUZZ_BUILDDIR/artifacts)
#   FUZZ_JOBS           make -j (default: number of CPUs)
# CI: `tests/fuzz/run-fuzzers.sh 60` from the source tree (needs clang; tools/bootstrap installs it).
# (All targets: those above and fuzz-grpc, gRPC's messages, issue #34.)
set -eu

srcdir=$(cd "$(dirname "$0")/../.." && pwd)
seconds=${1:-${FUZZ_SECONDS:-60}}
[ $# -gt 0 ] && shift
targets=${*:-fuzz-protocol fuzz-config-ini fuzz-config-json fuzz-config-yaml fuzz-connection fuzz-resp fuzz-client-limits fuzz-http-api fuzz-snapshot}
case $seconds in '' | *[!0-9]*) echo "run-fuzzers: SECONDS must be a number, got '$seconds'" >&2; exit 2 ;; esac
[ $# -gt 0 ] || targets="$targets fuzz-grpc"

if ! command -v clang >/dev/null 2>&1; then
        echo "run-fuzzers: clang not found (libFuzzer needs it): apt-get install clang" >&2
        exit 1
fi
builddir=${FUZZ_BUILDDIR:-}
if [ -z "$builddir" ]; then
        builddir=$(mktemp -d "${TMPDIR:-/tmp}/divvyd-fuzz-XXXXXX")
        [ -n "${FUZZ_KEEP:-}" ] || trap 'rm -rf "$builddir"' EXIT
fi
mkdir -p "$builddir"
builddir=$(cd "$builddir" && pwd)

# automake refuses a VPATH build next to an in-place one (CI builds in place first): then
# fuzz a clone of the committed tree, like CI's sanitizer stage does.
if [ -e "$srcdir/config.status" ]; then
        if [ ! -d "$builddir/src-clone" ]; then
                echo "== $srcdir is configured in place: fuzzing a clone of its committed tree"
                git clone -q "$srcdir" "$builddir/src-clone"
        fi
        srcdir=$builddir/src-clone
fi
if [ ! -x "$srcdir/configure" ]; then
        (cd "$srcdir" && autoreconf -fi >/dev/null)
fi
artifacts=${FUZZ_ARTIFACTS:-$builddir/artifacts}
mkdir -p "$artifacts"

mkdir -p "$builddir/build"
cd "$builddir/build"
if [ ! -f Makefile ]; then
        # Warnings are errors here as in every other build: clang checks a few things gcc
        # does not (e.g. -Wformat-nonliteral), and the fuzz build is where clang builds us.
        "$srcdir/configure" -q CC=clang --enable-fuzzer --enable-werror
fi
progs=""
for t in $targets; do progs="$progs tests/fuzz/$t"; done
make -s -j"${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}" $progs

total=0
failed=""
for t in $targets; do
        # New inputs go to a copy, never into the source tree's corpus.
        work="$builddir/corpus-work/$t"
        mkdir -p "$work"
        log="$builddir/$t.log"
        echo "== $t: ${seconds}s on $srcdir/tests/fuzz/corpus/$t"
        # -max_len: room for an over-long request line (8 KiB) and a pipeline behind it.
        # -timeout: one input taking 10 s is a hang. -rss_limit_mb: memory must stay bounded.
        set +e
        ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
                "./tests/fuzz/$t" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
                -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/$t-" \
                "$work" "$srcdir/tests/fuzz/corpus/$t" >"$log" 2>&1
        rc=$?
        set -e
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
        execs=${execs:-0}
        total=$((total + execs))
        if [ $rc -ne 0 ]; then
                failed="$failed $t"
                echo "   $t FAILED (exit $rc) after $execs executions; last lines of $log:"
                tail -n 40 "$log" | sed 's/^/   | /'
                ls -l "$artifacts" | sed 's/^/   | /'
        else
                echo "   $t: $execs executions, no crash ($(ls "$work" | wc -l) corpus entries)"
        fi
done
echo "== total: $total executions over $(echo $targets | wc -w) targets"
if [ -n "$failed" ]; then
        echo "run-fuzzers: crashes in:$failed (reproducers in $artifacts)" >&2
        [ -z "${FUZZ_BUILDDIR:-}" ] && [ -z "${FUZZ_KEEP:-}" ] && cp -r "$artifacts" "${TMPDIR:-/tmp}/divvyd-fuzz-artifacts-$$" &&
                echo "run-fuzzers: copied them to ${TMPDIR:-/tmp}/divvyd-fuzz-artifacts-$$" >&2
        exit 1
fi
