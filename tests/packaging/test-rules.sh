#!/bin/sh
# The shipped /etc/divvyd/rules.ini validates and limits nothing, its commented examples
# validate too (so that uncommenting them works), and /etc/default/divvyd holds only
# comments and VAR=value lines, as systemd's EnvironmentFile= reads them.
set -eu
: "${top_srcdir:=.}" "${top_builddir:=.}"
divvyd="$top_builddir/src/divvyd"
rules="$top_srcdir/data/rules.ini"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

out=$("$divvyd" --check-config "$rules") || { echo "FAIL: $out" >&2; fail=1; }
case "$out" in
*": OK, 1 rule "*) echo "ok: $out" ;;
*) echo "FAIL: expected one rule (the default): $out" >&2; fail=1 ;;
esac

# The default rule allows without counting: creditLimit > 0 and resetSeconds 0.
"$divvyd" --dump-config "$rules" | tr -d ' \n' > "$tmp/dump.json"
if grep -q '"default":{"creditLimit":1,"resetSeconds":0' "$tmp/dump.json"; then
        echo "ok: the default rule allows and keeps no counter"
else
        echo "FAIL: unexpected default rule: $(cat "$tmp/dump.json")" >&2
        fail=1
fi

# Uncomment the examples ("# [op]" and "# key = value" lines), keep the default rule.
{
        sed -n -e 's/^# \(\[.*\]\)$/\1/p' -e 's/^# \([A-Za-z]* = .*\)$/\1/p' "$rules"
        sed -n '/^\[default\]/,$p' "$rules"
} > "$tmp/examples.ini"
if out=$("$divvyd" --check-config "$tmp/examples.ini" 2>&1) && [ "$(grep -c '^\[' "$tmp/examples.ini")" -ge 4 ]; then
        echo "ok: examples: $out"
else
        echo "FAIL: the commented examples do not validate:" >&2
        echo "$out" >&2
        fail=1
fi

bad=$(grep -vnE '^(#.*|[A-Z_]+=.*|)$' "$top_srcdir/data/divvyd.default" || true)
if [ -n "$bad" ]; then
        echo "FAIL: data/divvyd.default has lines EnvironmentFile= does not expect: $bad" >&2
        fail=1
else
        echo "ok: data/divvyd.default"
fi

# The RPM's %pre feeds systemd-sysusers the same line as the sysusers.d file it installs.
want=$(grep '^u ' "$top_srcdir/systemd/sysusers.d/divvyd.conf")
if grep -qF "echo '$want' |" "$top_srcdir/packaging/divvyd.spec.in"; then
        echo "ok: the spec's %pre creates the user of sysusers.d/divvyd.conf"
else
        echo "FAIL: packaging/divvyd.spec.in %pre does not create: $want" >&2
        fail=1
fi

[ "$fail" -eq 0 ] && echo "PASS: rules" || echo "FAIL: rules"
exit "$fail"
