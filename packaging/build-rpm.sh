#!/bin/sh
# Builds the RPM packages divvyd, libdivvy and libdivvy-devel with rpmbuild -bb from the
# `make dist` tarball and the spec it carries (packaging/divvyd.spec, made from divvyd.spec.in).
#   packaging/build-rpm.sh [--tarball divvyd-X.Y.Z.tar.gz] [--outdir DIR] [--nocheck]
# Without --tarball, the source tree this script belongs to is configured in a temporary build
# directory and `make dist` makes one. The .rpm files end up in DIR (default ./packages).
# On a system whose packages are not RPMs (Debian: apt-get install rpm), build dependencies
# cannot be checked by rpm and are not: rpmbuild runs with --nodeps and without debuginfo.
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
. "$srcdir/packaging/common.sh"
parse_build_args "$@"
command -v rpmbuild >/dev/null 2>&1 || { echo "build-rpm: rpmbuild not found (package rpm)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/divvyd-rpm.XXXXXX")
trap 'rm -rf "$work"' EXIT

[ -n "$tarball" ] || make_dist
name=$(basename "$tarball" .tar.gz)

mkdir -p "$work/SOURCES" "$work/SPECS"
cp "$tarball" "$work/SOURCES/"
tar -xzOf "$tarball" "$name/packaging/divvyd.spec" > "$work/SPECS/divvyd.spec" ||
        { echo "build-rpm: $tarball has no packaging/divvyd.spec" >&2; exit 1; }

set -- --define "_topdir $work"
if ! rpm -q rpm >/dev/null 2>&1; then
        # Not an RPM-based system: rpm's database knows none of the build dependencies, and
        # there is no find-debuginfo.
        set -- "$@" --nodeps --define "debug_package %{nil}"
fi
without_check=""
[ -z "$nocheck" ] || without_check="--without check"
echo "build-rpm: rpmbuild -bb $without_check"
# shellcheck disable=SC2086 # $without_check is zero or two words
rpmbuild -bb $without_check "$@" "$work/SPECS/divvyd.spec" >"$work/build.log" 2>&1 ||
        { tail -n 80 "$work/build.log" >&2; echo "build-rpm: rpmbuild failed" >&2; exit 1; }
cp "$work/build.log" "$outdir/build-rpm.log"
for f in "$work"/RPMS/*/*.rpm; do
        cp "$f" "$outdir/"
        echo "build-rpm: $outdir/$(basename "$f")"
done
