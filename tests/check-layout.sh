#!/bin/sh
# The architecture, checked: which folder of src/ may include which (the map in HACKING.md),
# that only store/ includes <lmdb.h> and only daemon/ logs or touches sd-event, and that no
# two files of the daemon call each other's functions in a circle (from the symbols of the
# built objects: a file that defines f and a file that uses f form an edge).
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/.." && pwd)}
top_builddir=${top_builddir:-$top_srcdir}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$top_srcdir/tests/shell-checks.sh"

check() {
        name=$1
        shift
        if "$@"; then pass "$name"; else fail "$name"; fi
}

src=$top_srcdir/src

# Folders each folder may include from, besides itself and the system's headers.
allowed() {
        case $1 in
        shared) echo "" ;;
        core) echo "shared" ;;
        store) echo "shared core" ;;
        daemon) echo "shared core store" ;;
        libdivvy) echo "shared" ;;
        cli) echo "shared libdivvy" ;;
        *) echo "?" ;;
        esac
}

bad=""
for dir in "$src"/*/; do
        d=$(basename "$dir")
        ok=$(allowed "$d")
        [ "$ok" = "?" ] && bad="$bad\n  src/$d/ is not on the map (tests/check-layout.sh, HACKING.md)"
        for f in "$dir"*.[ch]; do
                [ -f "$f" ] || continue
                for inc in $(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f"); do
                        case $inc in
                        */*) target=${inc%%/*} ;;
                        *) target=$d ;;
                        esac
                        [ "$target" = "$d" ] && continue
                        case " $ok " in *" $target "*) ;; *) bad="$bad\n  src/$d/$(basename "$f") includes $inc" ;; esac
                done
        done
done
check "folders include only the folders under them" [ -z "$bad" ]
[ -z "$bad" ] || printf "%b\n" "$bad"

lmdb=$(grep -l '#include <lmdb.h>' -r "$src" | grep -v "^$src/store/" || true)
check "only src/store/ includes <lmdb.h>" [ -z "$lmdb" ]
[ -z "$lmdb" ] || echo "  $lmdb"
hiredis=$(grep -l '#include <hiredis/' -r "$src" | grep -v "^$src/store/" || true)
check "only src/store/ includes <hiredis/...> (the Redis store's client)" [ -z "$hiredis" ]
[ -z "$hiredis" ] || echo "  $hiredis"

sdevent=$(grep -lE '#include <systemd/|#include <microhttpd.h>|log_(debug|info|notice|warning|error)' -r \
        "$src/shared" "$src/core" "$src/store" "$src/libdivvy" "$src/cli" || true)
check "only src/daemon/ logs or includes sd-event and libmicrohttpd" [ -z "$sdevent" ]
[ -z "$sdevent" ] || echo "  $sdevent"

sockets=$(grep -lE '\b(socket|connect|accept4?|bind|listen|send|recv|epoll_[a-z]+)\(' -r "$src/core" "$src/shared" || true)
check "core/ and shared/ touch no socket" [ -z "$sockets" ]
[ -z "$sockets" ] || echo "  $sockets"

# The batch engine knows the protocols' front-ends only through frontend.h's Frontend: it includes
# none of them (frontend-*.h, frontends.h), so a protocol more is a file more, not an engine edit.
engine_fe=$(grep -lE '#include "(daemon/)?frontend(-[a-z0-9]+|s)\.h"' "$src/daemon/batch.c" "$src/daemon/batch.h" \
        "$src/daemon/frontend.h" || true)
check "the engine (batch.c) includes no protocol front-end" [ -z "$engine_fe" ]
[ -z "$engine_fe" ] || echo "  $engine_fe"

# Calls between files: every .o of the daemon's libraries, its defined and undefined symbols.
objs=$(find "$top_builddir/src/shared" "$top_builddir/src/core" "$top_builddir/src/store" \
        "$top_builddir/src/daemon" -name '*.o' ! -name 'divvyd-main.o' 2>/dev/null | grep '/\.libs/' || true)
if [ -z "$objs" ]; then
        objs=$(find "$top_builddir/src/shared" "$top_builddir/src/core" "$top_builddir/src/store" \
                "$top_builddir/src/daemon" -name '*.o' ! -name '*main.o' 2>/dev/null || true)
fi
cycles=$(for o in $objs; do
        name=$(basename "$o" .o | sed 's/^[a-z_]*_la-//')
        nm "$o" 2>/dev/null | awk -v f="$name" '$2 ~ /^[TDBR]$/ { print "def", f, $3 } $1 == "U" { print "use", f, $2 }'
done | python3 -c '
import sys
defs, uses = {}, []
for line in sys.stdin:
    kind, f, sym = line.split()
    if kind == "def":
        defs[sym] = f
    else:
        uses.append((f, sym))
edges = {}
for f, sym in uses:
    d = defs.get(sym)
    if d and d != f:
        edges.setdefault(f, set()).add(d)
# A file on a circle reaches itself; print each circle found once.
def reach(start):
    seen, todo = set(), [(start, [start])]
    while todo:
        node, path = todo.pop()
        for n in sorted(edges.get(node, ())):
            if n == start:
                return path
            if n not in seen:
                seen.add(n)
                todo.append((n, path + [n]))
    return None
printed = set()
for f in sorted(edges):
    path = reach(f)
    if path and frozenset(path) not in printed:
        printed.add(frozenset(path))
        print("  " + " -> ".join(path + [f]))
')
check "objects found for the call graph" [ -n "$objs" ]
check "no files call each other in a circle" [ -z "$cycles" ]
[ -z "$cycles" ] || echo "$cycles"

finish
