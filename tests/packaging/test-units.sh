#!/bin/sh
# The packaged units: `systemd-analyze verify` has nothing to say about them (it exits 0 on
# many errors, so any output counts as failure), and the service's sandbox keeps the exposure
# level that README and divvyd(8) promise.
set -eu
: "${top_srcdir:=.}" "${top_builddir:=.}"
SYSTEMD_ANALYZE=${SYSTEMD_ANALYZE:-$(command -v systemd-analyze || true)}
# Exposure score (0 = fully sandboxed, 10 = none) the service must not exceed: 2.0 is "OK".
MAX_EXPOSURE=2.0

if [ -z "$SYSTEMD_ANALYZE" ] || [ ! -x "$SYSTEMD_ANALYZE" ]; then
        echo "SKIP: test-units.sh: systemd-analyze not found (Debian package systemd)" >&2
        # CI installs systemd: there a skip would hide a broken setup.
        [ "${CI:-}" = true ] && { echo "FAIL: skipped under CI=true" >&2; exit 1; }
        exit 77
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The units as installed, except that they run the divvyd just built (verify checks that every
# Exec*= program exists and is executable).
divvyd=$(cd "$top_builddir/src" && pwd)/divvyd
sed -e "s|^\(Exec[A-Za-z]*=\)[^ ]*/divvyd |\1$divvyd |" \
        "$top_builddir/systemd/divvyd.service" > "$tmp/divvyd.service"
cp "$top_srcdir/systemd/divvyd.socket" "$top_srcdir/systemd/divvyd-admin.socket" \
        "$top_srcdir/systemd/divvyd-grpc.socket" "$top_srcdir/systemd/divvyd-http-api.socket" "$tmp/"
grep -q "^ExecStart=$divvyd " "$tmp/divvyd.service" || { echo "FAIL: no ExecStart= runs divvyd" >&2; exit 1; }

fail=0
if ! "$SYSTEMD_ANALYZE" verify --man=no "$tmp/divvyd.socket" "$tmp/divvyd-admin.socket" "$tmp/divvyd-grpc.socket" \
        "$tmp/divvyd-http-api.socket" "$tmp/divvyd.service" > "$tmp/verify.out" 2>&1 || [ -s "$tmp/verify.out" ]; then
        echo "FAIL: systemd-analyze verify:" >&2
        cat "$tmp/verify.out" >&2
        fail=1
else
        echo "ok: systemd-analyze verify divvyd.socket divvyd-admin.socket divvyd-grpc.socket divvyd-http-api.socket divvyd.service"
fi

# Units that must not verify, so that the check above is known to catch mistakes.
sed -e 's/^Type=notify$/Type=notifyy/' "$tmp/divvyd.service" > "$tmp/bad.service"
"$SYSTEMD_ANALYZE" verify --man=no "$tmp/bad.service" > "$tmp/bad.out" 2>&1 || true
if [ -s "$tmp/bad.out" ]; then
        echo "ok: a misspelt Type= is reported"
else
        echo "FAIL: systemd-analyze verify says nothing about Type=notifyy" >&2
        fail=1
fi

"$SYSTEMD_ANALYZE" security --offline=true "$tmp/divvyd.service" > "$tmp/security.out" 2>&1 || true
level=$(sed -n 's/.*Overall exposure level for divvyd.service: *\([0-9.]*\).*/\1/p' "$tmp/security.out" | head -1)
if [ -z "$level" ]; then
        echo "FAIL: systemd-analyze security printed no exposure level:" >&2
        cat "$tmp/security.out" >&2
        fail=1
elif awk -v l="$level" -v max="$MAX_EXPOSURE" 'BEGIN { exit !(l <= max) }'; then
        echo "ok: exposure level $level (at most $MAX_EXPOSURE)"
else
        echo "FAIL: exposure level $level is above $MAX_EXPOSURE:" >&2
        grep -E '^✗' "$tmp/security.out" >&2 || cat "$tmp/security.out" >&2
        fail=1
fi

# What the packages and the nspawn test rely on.
for want in 'Type=notify' 'ExecReload=kill -HUP $MAINPID' 'StateDirectory=divvyd' 'User=divvy' \
        'RuntimeDirectoryPreserve=yes' 'Sockets=divvyd.socket divvyd-admin.socket' \
        'Also=divvyd.socket divvyd-admin.socket'; do
        grep -qxF "$want" "$tmp/divvyd.service" || { echo "FAIL: divvyd.service lacks $want" >&2; fail=1; }
done
for want in 'ListenStream=/run/divvyd/divvyd.sock' 'ListenStream=127.0.0.1:8321' 'SocketGroup=divvy' \
        'SocketMode=0660' 'WantedBy=sockets.target'; do
        grep -qxF "$want" "$tmp/divvyd.socket" || { echo "FAIL: divvyd.socket lacks $want" >&2; fail=1; }
done
# The admin socket (REFUND, RESET): divvyd knows it by its name, which must start with "admin"
# (src/daemon/listener.h: LISTEN_ADMIN_FDNAME); only the service user may connect.
for want in 'ListenStream=/run/divvyd/admin.sock' 'SocketUser=divvy' 'SocketMode=0600' \
        'FileDescriptorName=admin' 'Service=divvyd.service' 'WantedBy=sockets.target'; do
        grep -qxF "$want" "$tmp/divvyd-admin.socket" || { echo "FAIL: divvyd-admin.socket lacks $want" >&2; fail=1; }
done
# The plain socket must not be taken for an admin one.
name=$(sed -n 's/^FileDescriptorName=//p' "$tmp/divvyd.socket")
case "$name" in admin*) echo "FAIL: divvyd.socket's FileDescriptorName=$name makes it an admin listener" >&2; fail=1 ;; esac
grep -q '^WantedBy=' "$tmp/divvyd.service" && { echo "FAIL: divvyd.service must be started by its socket, not WantedBy=" >&2; fail=1; }

[ "$fail" -eq 0 ] && echo "PASS: units" || echo "FAIL: units"
exit "$fail"
