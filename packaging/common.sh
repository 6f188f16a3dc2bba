# Shared by build-deb.sh, build-rpm.sh and ci-packages.sh (sourced, POSIX sh). Needs $srcdir
# (the source tree) and $work (a temporary directory of the caller's).

# parse_build_args ARGS...: [--tarball FILE] [--outdir DIR] [--nocheck]; sets $tarball (absolute
# or empty), $outdir (absolute, created; default ./packages) and $nocheck (1 or empty).
parse_build_args() {
        tarball=""
        outdir="$PWD/packages"
        nocheck=""
        while [ $# -gt 0 ]; do
                case "$1" in
                --tarball) tarball=$(cd "$(dirname "$2")" && pwd)/$(basename "$2"); shift 2 ;;
                --outdir) mkdir -p "$2"; outdir=$(cd "$2" && pwd); shift 2 ;;
                --nocheck) nocheck=1; shift ;;
                *) echo "usage: $0 [--tarball FILE] [--outdir DIR] [--nocheck]" >&2; exit 2 ;;
                esac
        done
        mkdir -p "$outdir"
}

# make_dist: make the tarball from $srcdir into $work/dist; sets $tarball. A tree configured in
# place (the quick start and CI build there) makes it itself: automake refuses a second,
# out-of-tree configuration beside an in-place one.
make_dist() {
        echo "$(basename "$0"): make dist"
        [ -x "$srcdir/configure" ] || (cd "$srcdir" && autoreconf -fi >/dev/null)
        mkdir "$work/dist"
        if [ -e "$srcdir/config.status" ]; then
                (cd "$srcdir" && rm -f divvyd-*.tar.gz && make -s dist && mv divvyd-*.tar.gz "$work/dist/")
        else
                (cd "$work/dist" && "$srcdir/configure" -q && make -s dist)
        fi >"$work/dist.log" 2>&1 || {
                cat "$work/dist.log" >&2
                echo "$(basename "$0"): make dist failed" >&2
                exit 1
        }
        tarball=$(ls "$work"/dist/divvyd-*.tar.gz)
}
