#!/bin/sh
# The packages under a real systemd (PID 1 in systemd-nspawn): install the .debs, enable the
# socket, hit the Unix socket with divvy (socket activation starts the service), reload with
# changed rules (and refuse broken ones), read status and journal, stop, start again and find
# the counters intact.
#   tests/packaging/nspawn-test.sh DIR     (DIR holds divvyd_*.deb and libdivvy0_*.deb)
# The container boots this machine's own root file system through an overlay whose upper layer
# is a tmpfs: nothing of the host changes (systemd-nspawn refuses --volatile=overlay on "/").
# It has its own network namespace (loopback only), so its sockets never meet the host's.
# Exit 0 passed, 1 failed, 77 when systemd-nspawn cannot boot here (said loudly: SKIPPED;
# under CI=true that is a failure, exit 1: CI is meant to boot it).
# Every wait is bounded; the whole test takes about 20-30 s.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
BOOT_TIMEOUT=90  # seconds for the container's systemd to finish booting (about 10 s here)
CMD_TIMEOUT=60   # seconds for any one command run inside the container

debdir=$(cd "${1:?usage: $0 DIR-WITH-DEBS}" && pwd)
[ "$(id -u)" -eq 0 ] || skip "nspawn test needs root (mounts an overlay, boots a container)"
command -v systemd-nspawn >/dev/null 2>&1 || skip "systemd-nspawn not found (Debian package systemd-container)"
command -v nsenter >/dev/null 2>&1 || skip "nsenter not found (util-linux)"
set -- "$debdir"/libdivvy0_*.deb "$debdir"/divvyd_*.deb
for f in "$@"; do [ -f "$f" ] || die "no package $f"; done

tmp=$(mktemp -d /var/tmp/divvyd-nspawn.XXXXXX)
root="$tmp/root"
nspawn_pid=""
leader=""
cleanup() {
        if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
                # SIGTERM: nspawn asks the container's systemd to power off.
                kill -TERM "$nspawn_pid" 2>/dev/null || true
                wait_pid_exit 30 "$nspawn_pid" || {
                        say "container did not power off within 30 s: killing it"
                        kill -KILL "$nspawn_pid" 2>/dev/null || true
                }
        fi
        [ -n "$leader" ] && kill -KILL "$leader" 2>/dev/null || true
        umount "$root" 2>/dev/null || umount -l "$root" 2>/dev/null || true
        umount "$tmp/layers" 2>/dev/null || umount -l "$tmp/layers" 2>/dev/null || true
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# The host's root, read-only below a tmpfs upper layer.
mkdir -p "$tmp/layers" "$root"
mount -t tmpfs -o size=1g,mode=0700 divvyd-nspawn "$tmp/layers" 2>"$tmp/mount.err" ||
        skip "cannot mount a tmpfs here: $(cat "$tmp/mount.err")"
mkdir "$tmp/layers/upper" "$tmp/layers/work"
mount -t overlay divvyd-nspawn -o "lowerdir=/,upperdir=$tmp/layers/upper,workdir=$tmp/layers/work" "$root" \
        2>"$tmp/mount.err" || skip "cannot mount an overlay of / here: $(cat "$tmp/mount.err")"
mkdir -p "$root/root/divvyd-debs"
cp "$@" "$root/root/divvyd-debs/"
# The container is not this machine: no machine-id of ours, no divvyd leftovers.
rm -f "$root/etc/machine-id"
rm -rf "$root/var/lib/divvyd" "$root/etc/divvyd"
# A policy-rc.d (Docker images have one that forbids everything) would keep the maintainer
# scripts from starting and stopping the units as they do on a real machine.
rm -f "$root/usr/sbin/policy-rc.d"

say "booting systemd in systemd-nspawn (basic.target, private network)"
systemd-nspawn -D "$root" --boot --register=no --keep-unit --private-network -M divvyd-pkgtest \
        --console=pipe systemd.firstboot=off systemd.unit=basic.target >"$tmp/console.log" 2>&1 </dev/null &
nspawn_pid=$!

find_leader() {
        for p in $(ps -o pid= --ppid "$nspawn_pid"); do
                [ "$(cat "/proc/$p/comm" 2>/dev/null)" = systemd ] && { leader=$p; return 0; }
        done
        return 1
}
if ! wait_until 20 find_leader; then
        tail -n 20 "$tmp/console.log" >&2
        kill -0 "$nspawn_pid" 2>/dev/null || nspawn_pid=""
        skip "systemd-nspawn did not start a container here (console above)"
fi
find_leader

# inside CMD...: run a shell command inside the container, bounded.
inside() {
        timeout "$CMD_TIMEOUT" nsenter -t "$leader" -m -u -i -n -p -C -- \
                env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 SYSTEMD_COLORS=0 SYSTEMD_PAGER= \
                /bin/sh -c "$*"
}
# PID 1 listens on its private bus socket early in the boot; then wait for the boot to finish.
state="no /run/systemd/private"
if wait_until "$BOOT_TIMEOUT" inside "test -S /run/systemd/private"; then
        state=$(inside "timeout $BOOT_TIMEOUT systemctl is-system-running --wait" 2>&1 || true)
fi
case "$state" in
running | degraded) ok "container booted ($state)" ;;
*)
        tail -n 30 "$tmp/console.log" >&2
        skip "the container's systemd did not finish booting within $BOOT_TIMEOUT s (state: '$state')"
        ;;
esac

step() { printf '\n-- %s\n' "$*"; }

step "install"
inside "dpkg -i /root/divvyd-debs/libdivvy0_*.deb /root/divvyd-debs/divvyd_*.deb" >"$tmp/dpkg.log" 2>&1 ||
        { cat "$tmp/dpkg.log" >&2; die "dpkg -i in the container"; }
ok "dpkg -i"
expect "socket enabled by the package" "enabled" "$(inside systemctl is-enabled divvyd.socket 2>&1)"
inside "systemctl enable --now divvyd.socket" >/dev/null 2>&1 || bad "systemctl enable --now divvyd.socket"
expect "divvyd.socket" "active" "$(inside systemctl is-active divvyd.socket 2>&1)"
expect "/run/divvyd/divvyd.sock" "660 root divvy" "$(inside stat -c "'%a %U %G'" /run/divvyd/divvyd.sock 2>&1)"
expect "/run/divvyd" "750 divvy divvy" "$(inside stat -c "'%a %U %G'" /run/divvyd 2>&1)"
expect "admin socket enabled by the package" "enabled" "$(inside systemctl is-enabled divvyd-admin.socket 2>&1)"
expect "divvyd-admin.socket" "active" "$(inside systemctl is-active divvyd-admin.socket 2>&1)"
expect "/run/divvyd/admin.sock" "600 divvy divvy" "$(inside stat -c "'%a %U %G'" /run/divvyd/admin.sock 2>&1)"

step "socket activation"
# The postinst started the socket (deb-systemd-invoke starts the service only if it is enabled
# itself, and it is enabled through its socket); make sure the service is down to see activation.
say "service after install: $(inside systemctl is-active divvyd.service 2>&1)"
inside "systemctl stop divvyd.service" >/dev/null 2>&1 || bad "systemctl stop divvyd.service"
expect "service before the first connection" "inactive" "$(inside systemctl is-active divvyd.service 2>&1)"
expect "divvy hit (Unix socket)" "true 1 0" "$(inside divvy hit --timeout 20 method=GET path=/status 2>&1)"
expect "service after the first connection" "active" "$(inside systemctl is-active divvyd.service 2>&1)"
expect "divvy hit (TCP 127.0.0.1:8321)" "true 1 0" "$(inside divvy hit -a 127.0.0.1:8321 method=GET path=/status 2>&1)"
# The admin socket is passed too, by its name, and only the service user may use it.
expect "divvy hit (admin socket, as divvy)" "true 1 0" \
        "$(inside setpriv --reuid=divvy --regid=divvy --clear-groups divvy hit -s /run/divvyd/admin.sock method=GET path=/status 2>&1)"
if inside setpriv --reuid=nobody --regid=divvy --clear-groups divvy hit -q -s /run/divvyd/admin.sock a=b >/dev/null 2>&1; then
        bad "a user other than divvy (group divvy) reached /run/divvyd/admin.sock"
else
        ok "a user other than divvy cannot reach /run/divvyd/admin.sock, even in group divvy"
fi
inside "journalctl -u divvyd.service --no-pager -o cat" | grep -q '^Listening on fd [0-9]* (admin) \[admin\] (socket activation)$' &&
        ok "journal: $(inside "journalctl -u divvyd.service --no-pager -o cat" | grep '(admin) \[admin\]' | tail -1)" ||
        bad "the journal does not show the admin socket adopted as admin"
expect "divvyd runs as" "divvy" "$(inside 'ps -o user= -p $(systemctl show -P MainPID divvyd.service)' 2>&1 | tr -d ' ')"
inside "systemctl show -P StatusText divvyd.service" | grep -q "^Serving" &&
        ok "status: $(inside systemctl show -P StatusText divvyd.service)" || bad "no 'Serving' STATUS= from sd_notify"
expect "state directory" "divvy" "$(inside stat -c %U /var/lib/divvyd/data.mdb 2>&1)"
# The socket's group (which clients join) cannot read the counters or their id key.
expect "database files the daemon's alone" "600 600" "$(inside stat -c %a /var/lib/divvyd/data.mdb /var/lib/divvyd/wal.lock 2>&1 | tr '\n' ' ' | sed 's/ $//')"

step "reload with changed rules"
inside "cat > /etc/divvyd/rules.ini" <<'RULES'
[method=GET path=/limited]
creditLimit = 3
resetSeconds = 3600
label = limited

[default]
creditLimit = 1
resetSeconds = 0
RULES
pid_before=$(inside systemctl show -P MainPID divvyd.service)
inside "systemctl reload divvyd.service" >"$tmp/reload.log" 2>&1 || { cat "$tmp/reload.log" >&2; bad "systemctl reload divvyd"; }
expect "same process after reload" "$pid_before" "$(inside systemctl show -P MainPID divvyd.service)"
# the reload is asynchronous: divvyd sends READY=1 and a new STATUS= when it is done
wait_until 10 inside "systemctl show -P StatusText divvyd.service | grep -q '^Serving 2 rules'" &&
        ok "status after reload: $(inside systemctl show -P StatusText divvyd.service)" || bad "STATUS= does not show 2 rules after reload"
# The first hit of the window answers exactly 3600; later ones count down from it by at most
# the seconds measured since (reset_bounds), never a rewritten reply.
t0=$(uptime_s)
expect "hit 1 after reload" "true 2 3600" "$(inside divvy hit method=GET path=/limited 2>&1)"
# shellcheck disable=SC2046
expect_hit "hit 2 after reload" "true 1" $(reset_bounds 3600 "$t0") "$(inside divvy hit method=GET path=/limited 2>&1)"
inside "journalctl -u divvyd.service --no-pager -o cat" >"$tmp/journal.log" 2>&1 || true
grep -q "^Reloaded .*rules.ini" "$tmp/journal.log" && ok "journal: $(grep '^Reloaded .*rules.ini' "$tmp/journal.log" | tail -1)" ||
        { cat "$tmp/journal.log" >&2; bad "journalctl -u divvyd does not show the reload"; }
inside "systemctl status --no-pager divvyd.service" >"$tmp/status.log" 2>&1 || true
grep -q "Reloaded" "$tmp/status.log" && ok "systemctl status shows the reload" || { cat "$tmp/status.log" >&2; bad "systemctl status does not show the reload"; }
inside "journalctl -u divvyd.service -p info --no-pager -o cat" | grep -q "^Reloading" &&
        ok "journal keeps divvyd's priorities (info)" || bad "journalctl -p info finds no 'Reloading'"

step "a broken rules file is refused by systemctl reload"
inside "cp /etc/divvyd/rules.ini /root/good.ini && printf '[method=GET]\ncreditlimit = 3\n' >> /etc/divvyd/rules.ini"
if inside "systemctl reload divvyd.service" >"$tmp/badreload.log" 2>&1; then
        bad "systemctl reload succeeded on a broken rules file"
else
        ok "systemctl reload fails on a broken rules file"
fi
inside "journalctl -u divvyd.service --no-pager -o cat" | grep -q 'creditlimit' &&
        ok "journal names the error" || bad "the journal does not show the rules error"
# shellcheck disable=SC2046
expect_hit "still serving after a refused reload" "true 0" $(reset_bounds 3600 "$t0") \
        "$(inside divvy hit method=GET path=/limited 2>&1)"
inside "cp /root/good.ini /etc/divvyd/rules.ini"

step "stop, start again: counters intact"
inside "systemctl stop divvyd.socket divvyd.service" >/dev/null 2>&1 || bad "systemctl stop"
expect "service stopped" "inactive" "$(inside systemctl is-active divvyd.service 2>&1)"
expect "exit status" "0" "$(inside systemctl show -P ExecMainStatus divvyd.service 2>&1)"
inside "systemctl start divvyd.socket" >/dev/null 2>&1 || bad "systemctl start divvyd.socket"
# shellcheck disable=SC2046
expect_hit "hit after restart (counter kept)" "false 0" $(reset_bounds 3600 "$t0") \
        "$(inside divvy hit method=GET path=/limited 2>&1)"
inside "systemctl restart divvyd.service" >/dev/null 2>&1 || bad "systemctl restart divvyd.service"
# shellcheck disable=SC2046
expect_hit "hit after systemctl restart" "false 0" $(reset_bounds 3600 "$t0") \
        "$(inside divvy hit method=GET path=/limited 2>&1)"
expect "socket survives service restarts" "660 root divvy" "$(inside stat -c "'%a %U %G'" /run/divvyd/divvyd.sock 2>&1)"
expect "admin socket survives service restarts" "600 divvy divvy" "$(inside stat -c "'%a %U %G'" /run/divvyd/admin.sock 2>&1)"

step "metrics through /etc/default/divvyd, inside the sandbox"
inside "echo HTTP_SERVICE_PORT=9321 >> /etc/default/divvyd && systemctl restart divvyd.service" >/dev/null 2>&1 ||
        bad "restart with HTTP_SERVICE_PORT set"
inside "divvy hit -q method=GET path=/limited" >/dev/null 2>&1 || true
inside "python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:9321/metrics\", timeout=10).read().decode())'" \
        >"$tmp/metrics.txt" 2>&1 || true
grep -q '^divvy_hits_total{status="rejected",rule_label="limited"} 1$' "$tmp/metrics.txt" &&
        ok "Prometheus: $(grep 'rule_label="limited"' "$tmp/metrics.txt" | head -1)" ||
        { head -n 20 "$tmp/metrics.txt" >&2; bad "no divvy_hits_total on http://127.0.0.1:9321/metrics"; }

step "upgrade (the same packages again): service restarted, socket kept, counters intact"
sock_since=$(inside systemctl show -P ActiveEnterTimestampMonotonic divvyd.socket)
pid_before=$(inside systemctl show -P MainPID divvyd.service)
inside "dpkg -i /root/divvyd-debs/libdivvy0_*.deb /root/divvyd-debs/divvyd_*.deb" >"$tmp/upgrade.log" 2>&1 ||
        { cat "$tmp/upgrade.log" >&2; bad "dpkg -i over the installed packages"; }
expect "socket not restarted" "$sock_since" "$(inside systemctl show -P ActiveEnterTimestampMonotonic divvyd.socket)"
pid_after=$(inside systemctl show -P MainPID divvyd.service)
[ "$pid_after" != "$pid_before" ] && ok "service restarted ($pid_before -> $pid_after)" ||
        bad "service not restarted by the upgrade (pid $pid_before -> $pid_after)"
# shellcheck disable=SC2046
expect_hit "hit after upgrade (counter kept)" "false 0" $(reset_bounds 3600 "$t0") \
        "$(inside divvy hit method=GET path=/limited 2>&1)"

step "purge"
inside "dpkg --purge divvyd libdivvy0" >"$tmp/purge.log" 2>&1 || { cat "$tmp/purge.log" >&2; bad "dpkg --purge"; }
expect "units gone" "" "$(inside 'systemctl list-units --all --plain --no-legend "divvyd*"' 2>&1)"
expect "state gone" "no" "$(inside 'test -e /var/lib/divvyd && echo yes || echo no')"

if [ "$pkg_fails" -ne 0 ]; then
        say "---- journal of divvyd ----"
        inside "journalctl -u divvyd.service -u divvyd.socket --no-pager" 2>&1 | tail -n 40
        die "nspawn test: $pkg_fails failures"
fi
say "PASS: nspawn test"
