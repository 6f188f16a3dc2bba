#!/bin/sh
# Builds the Debian packages divvyd, libdivvy0 and libdivvy-dev from the `make dist` tarball:
# the tarball becomes the .orig.tar.gz, packaging/debian becomes debian/ of its unpacked copy
# (dpkg-buildpackage wants debian/ at the top), then dpkg-buildpackage -us -uc -b and lintian.
#   packaging/build-deb.sh [--tarball divvyd-X.Y.Z.tar.gz] [--outdir DIR] [--nocheck]
# Without --tarball, the source tree this script belongs to is configured in a temporary
# build directory and `make dist` makes one. The .deb files end up in DIR (default
# ./packages). Needs: build-essential debhelper dpkg-dev fakeroot lintian and the build
# dependencies of packaging/debian/control (dpkg-checkbuilddeps lists what is missing).
set -eu

srcdir=$(cd "$(dirname "$0")/.." && pwd)
. "$srcdir/packaging/common.sh"
parse_build_args "$@"

work=$(mktemp -d "${TMPDIR:-/tmp}/divvyd-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT

[ -n "$tarball" ] || make_dist

name=$(basename "$tarball" .tar.gz)            # divvyd-0.1.0
version=${name#divvyd-}
tar -C "$work" -xzf "$tarball"
tree="$work/$name"
[ -d "$tree/packaging/debian" ] || { echo "build-deb: $tarball has no packaging/debian" >&2; exit 1; }
cp -a "$tree/packaging/debian" "$tree/debian"
cp "$tarball" "$work/divvyd_$version.orig.tar.gz"

# The changelog's upstream version must be the tarball's, or the packages would lie.
deb_version=$(cd "$tree" && dpkg-parsechangelog -S Version)
case "$deb_version" in
"$version"-*) ;;
*) echo "build-deb: debian/changelog says $deb_version, the tarball is $version: add a changelog entry" >&2
   exit 1 ;;
esac

cd "$tree"
dpkg-checkbuilddeps || { echo "build-deb: install the missing build dependencies above" >&2; exit 1; }
if [ -n "$nocheck" ]; then
        DEB_BUILD_OPTIONS="nocheck ${DEB_BUILD_OPTIONS:-}"
        export DEB_BUILD_OPTIONS
fi
echo "build-deb: dpkg-buildpackage -us -uc -b (${DEB_BUILD_OPTIONS:-})"
dpkg-buildpackage -us -uc -b -j"$(nproc)" >"$work/build.log" 2>&1 ||
        { tail -n 80 "$work/build.log" >&2; echo "build-deb: dpkg-buildpackage failed" >&2; exit 1; }
cp "$work/build.log" "$outdir/build-deb.log"

changes=$(ls "$work"/divvyd_"$deb_version"_*.changes)
for f in $(sed -n '/^Files:/,$s/^ [0-9a-f]* [0-9]* [^ ]* [^ ]* \(.*\.deb\)$/\1/p' "$changes"); do
        cp "$work/$f" "$outdir/"
        echo "build-deb: $outdir/$f"
done
cp "$changes" "$outdir/"

if command -v lintian >/dev/null 2>&1; then
        # Tags we accept are overridden, with the reason, in debian/*.lintian-overrides;
        # anything at warning level or above fails the build.
        echo "build-deb: lintian"
        lintian --fail-on error,warning --display-info "$changes" ||
                { echo "build-deb: lintian found problems" >&2; exit 1; }
fi
