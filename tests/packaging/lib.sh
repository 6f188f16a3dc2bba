# Shell helpers of the package tests (tests/packaging/*.sh, packaging/ci-packages.sh).
# POSIX sh; sourced, not run.

# Exit code of a test that cannot run here (automake's SKIP); callers report it as skipped.
EXIT_SKIP=77

pkg_fails=0
say() { printf '%s\n' "$*"; }
ok() { printf 'ok: %s\n' "$*"; }
bad() {
        printf 'FAIL: %s\n' "$*" >&2
        pkg_fails=$((pkg_fails + 1))
}
die() {
        printf 'FAIL: %s\n' "$*" >&2
        exit 1
}
# Loud, so that nobody mistakes it for a pass. Under CI=true a skip is a FAILURE (exit 1):
# CI installs every tool and runs as root, so what cannot run there is broken.
skip() {
        if [ "${CI:-}" = true ]; then
                printf '\nSKIP: %s: %s (FAILED: CI=true, and CI is meant to run it)\n\n' "$(basename "$0")" "$*" >&2
                exit 1
        fi
        printf '\n*** SKIPPED: %s ***\nSKIP: %s: %s\n\n' "$*" "$(basename "$0")" "$*" >&2
        exit "$EXIT_SKIP"
}

# expect NAME WANT GOT: one comparison, recorded.
expect() {
        if [ "$2" = "$3" ]; then ok "$1: $3"; else bad "$1: expected '$2', got '$3'"; fi
}

# expect_hit NAME "ALLOWED CREDIT" LO HI GOT: divvy hit's output "ALLOWED CREDIT RESET" with
# RESET a number in [LO, HI] (a window's reset counts down while the test runs: a range from
# measured time, see reset_bounds, instead of rewriting the reply).
expect_hit() {
        eh_reset=${5##* }
        if [ "${5% *}" = "$2" ] && [ "$eh_reset" -eq "$eh_reset" ] 2>/dev/null &&
                [ "$eh_reset" -ge "$3" ] && [ "$eh_reset" -le "$4" ]; then
                ok "$1: $5"
        else
                bad "$1: expected '$2 R' with R in [$3, $4], got '$5'"
        fi
}

# Seconds since boot (monotonic, whole): the clock of reset_bounds.
uptime_s() { cut -d' ' -f1 /proc/uptime | cut -d. -f1; }

# reset_bounds RESET T0: "LO HI" for a window of RESET seconds first hit after uptime T0: its
# reset has counted down by at most the whole seconds since then, plus one for rounding.
reset_bounds() {
        rb_elapsed=$(($(uptime_s) - $2 + 1))
        echo "$(($1 - rb_elapsed - 1)) $1"
}

# wait_until SECONDS COMMAND...: run COMMAND every 0.2 s until it succeeds; fail after SECONDS.
wait_until() {
        wu_limit=$(($1 * 5))
        shift
        wu_i=0
        while ! "$@" >/dev/null 2>&1; do
                wu_i=$((wu_i + 1))
                [ "$wu_i" -lt "$wu_limit" ] || return 1
                sleep 0.2
        done
}

# wait_pid_exit SECONDS PID: wait for PID (a child of ours) to exit; its status in $wait_status.
wait_pid_exit() {
        wp_limit=$(($1 * 5))
        wp_i=0
        while kill -0 "$2" 2>/dev/null; do
                # A zombie child still answers kill -0; its state is Z.
                [ "$(ps -o stat= -p "$2" 2>/dev/null | cut -c1)" = Z ] && break
                wp_i=$((wp_i + 1))
                [ "$wp_i" -lt "$wp_limit" ] || return 1
                sleep 0.2
        done
        wait_status=0
        wait "$2" || wait_status=$?
        return 0
}

# A TCP port on 127.0.0.1 nobody listens on.
free_port() {
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
