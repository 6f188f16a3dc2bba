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
# Loud, so that nobody mistakes it for a pass.
skip() {
        printf '\n*** SKIPPED: %s ***\n\n' "$*" >&2
        exit "$EXIT_SKIP"
}

# expect NAME WANT GOT: one comparison, recorded.
expect() {
        if [ "$2" = "$3" ]; then ok "$1: $3"; else bad "$1: expected '$2', got '$3'"; fi
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
