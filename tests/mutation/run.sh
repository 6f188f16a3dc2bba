#!/usr/bin/env bash
# The mutation check (make check-mutation; HACKING.md, "The mutation check"): applies each
# mutant of tests/mutation/mutants to its source file, one at a time, rebuilds, runs the tests
# the mutant names, and restores the file. A mutant is killed when a test fails; the check
# fails if any survives, or if a mutant's sed expression no longer changes its file (the code
# moved on: fix the expression, never drop the mutant silently).
#
#   tests/mutation/run.sh [-l] [PATTERN]    from the top of a configured build tree
#                                           (the sources: $top_srcdir, else the script's tree)
#     -l        list the mutants and check each still applies; build and run nothing
#     PATTERN   only the mutants whose file or description contains PATTERN (grep -E)
#
# Each mutant is a block of "key: value" lines, blocks separated by blank lines:
#   file:  the source file, relative to the top of the tree
#   sed:   a sed script (sed -E) that must change the file
#   tests: the test programs or scripts to run (make check's TESTS names, space separated)
#   what:  one line: the bug it plants
# The file is edited in place and restored from a copy after each mutant, and on any exit
# (an error, Ctrl-C): the tree is left as it was. Nothing is decided by timing; the time each
# mutant took is reported.
set -euo pipefail

src=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
list="$src/tests/mutation/mutants"
make=${MAKE:-make}
only_list=false
if [ "${1:-}" = -l ]; then
        only_list=true
        shift
fi
pattern=${1:-}
[ -f Makefile ] || { echo "run.sh: run it from a configured build tree (no Makefile in $PWD)" >&2; exit 2; }

backup=$(mktemp -d "${TMPDIR:-/tmp}/divvyd-mutation-XXXXXX")
mutated="" # the file currently mutated ("" : none)
restore() {
        if [ -n "$mutated" ]; then
                cp "$backup/original" "$mutated" # a new mtime: the next make rebuilds it
                mutated=""
        fi
}
on_exit() {
        local rc=$?
        restore
        rm -rf "$backup"
        exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# mutants as records: file, sed, tests, what (one per line each, a "--" line after each)
records() {
        awk '
        function flush() {
                if (file != "" || sed != "" || tests != "" || what != "") {
                        if (file == "" || sed == "" || tests == "" || what == "") {
                                printf "mutants:%d: a mutant needs file, sed, tests and what\n", start > "/dev/stderr"
                                exit 2
                        }
                        print file; print sed; print tests; print what; print "--"
                }
                file = sed = tests = what = ""; start = 0
        }
        /^#/ { next }
        /^[ \t]*$/ { flush(); next }
        {
                if (!start) start = NR
                key = $0; sub(/:.*/, "", key)
                val = $0; sub(/^[a-z]+:[ \t]*/, "", val)
                if (key == "file") file = val
                else if (key == "sed") sed = val
                else if (key == "tests") tests = val
                else if (key == "what") what = val
                else { printf "mutants:%d: unknown key \"%s\"\n", NR, key > "/dev/stderr"; exit 2 }
        }
        END { flush() }' "$list"
}

total=0 killed=0 built=()
survivors=() stale=()
start_all=$(date +%s)
exec 3< <(records)
while IFS= read -r file <&3 && IFS= read -r expr <&3 && IFS= read -r tests <&3 &&
        IFS= read -r what <&3 && IFS= read -r _ <&3; do
        if [ -n "$pattern" ] && ! printf '%s %s\n' "$file" "$what" | grep -qE -- "$pattern"; then
                continue
        fi
        total=$((total + 1))
        label="$file: $what"
        file="$src/$file"
        [ -f "$file" ] || { echo "STALE     $label (no such file)"; stale+=("$label"); continue; }
        cp "$file" "$backup/original"
        sed -E -e "$expr" "$backup/original" > "$backup/mutant"
        if cmp -s "$backup/original" "$backup/mutant"; then
                echo "STALE     $label (the sed expression changes nothing)"
                stale+=("$label")
                continue
        fi
        if $only_list; then
                echo "applies   $label"
                continue
        fi
        t0=$(date +%s)
        mutated=$file
        cp "$backup/mutant" "$file"
        programs=()
        for t in $tests; do
                case "$t" in
                *.py) programs+=(src/divvyd) ;;
                *.sh) ;;
                *) programs+=("$t") ;;
                esac
        done
        built+=("${programs[@]}")
        if ! $make -s "${programs[@]}" > "$backup/build.log" 2>&1; then
                # a mutant that does not build proves nothing: fix its expression
                restore
                echo "NO BUILD  $label"
                sed 's/^/    /' "$backup/build.log" | tail -20
                stale+=("$label")
                continue
        fi
        status=0
        # check-TESTS runs exactly these (it removes their old logs first)
        $make -s check-TESTS TESTS="$tests" > "$backup/test.log" 2>&1 || status=$?
        restore
        secs=$(( $(date +%s) - t0 ))
        if [ "$status" -ne 0 ]; then
                killed=$((killed + 1))
                failed=$(sed -n 's/^FAIL: \([^ ]*\).*/\1/p; s/^ERROR: \([^ ]*\).*/\1/p' "$backup/test.log" |
                        sort -u | tr '\n' ' ')
                printf 'killed    %s (%ss; by %s)\n' "$label" "$secs" "${failed:-the build of the tests}"
        else
                printf 'SURVIVED  %s (%ss; %s all passed)\n' "$label" "$secs" "$tests"
                survivors+=("$label")
        fi
done
exec 3<&-

elapsed=$(( $(date +%s) - start_all ))
if $only_list; then
        echo "mutation: $total mutants listed, ${#stale[@]} stale"
        [ "${#stale[@]}" -eq 0 ]
        exit
fi
# the tree is restored: rebuild what the mutants touched, so no mutated object stays behind
# (the test programs link the libraries statically)
$make -s all "${built[@]}" > "$backup/build.log" 2>&1 || { cat "$backup/build.log"; echo "mutation: the restored tree does not build"; exit 1; }
echo "mutation: $total mutants, $killed killed, ${#survivors[@]} survived, ${#stale[@]} stale, in ${elapsed}s"
for m in "${survivors[@]}"; do echo "  survived: $m"; done
for m in "${stale[@]}"; do echo "  stale: $m"; done
[ "${#survivors[@]}" -eq 0 ] && [ "${#stale[@]}" -eq 0 ] && [ "$total" -gt 0 ]
