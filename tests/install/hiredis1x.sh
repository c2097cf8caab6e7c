#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Compiles the library and the tool against hiredis 1.x headers. Debian 12
# ships only hiredis 0.14.1, so this takes the headers from Debian's next
# release: libhiredis-dev is downloaded (not installed) into a temporary
# directory. Exits 77 (CTest: skipped) if it cannot be downloaded.
#   hiredis1x.sh SOURCE_DIR C_COMPILER
set -u
src=$1 cc=$2
work=$(mktemp -d /tmp/rlock-hiredis1-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial"
echo "deb http://deb.debian.org/debian trixie main" >"$work/sources.list"
opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o "Dir::State::Lists=$work/lists" -o "Dir::Cache::Archives=$work/archives"
      -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
[ "$(id -u)" = 0 ] && opts+=(-o APT::Sandbox::User=root)
if ! (cd "$work" && timeout 120 apt-get "${opts[@]}" -q update >/dev/null 2>&1 &&
      timeout 120 apt-get "${opts[@]}" -q download libhiredis-dev >/dev/null 2>&1); then
    echo "skipped: could not download hiredis 1.x headers from Debian"
    exit 77
fi
dpkg-deb -x "$work"/libhiredis-dev_*.deb "$work/x" || exit 1
inc="$work/x/usr/include"
grep -q "define HIREDIS_MAJOR 1" "$inc/hiredis/hiredis.h" || {
    echo "downloaded headers are not hiredis 1.x"; exit 1; }
status=0
for f in $(find "$src/src" "$src/cli" -name '*.c'); do
    "$cc" -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wpedantic -Wshadow \
        -Wstrict-prototypes -Wmissing-prototypes -Werror -fsyntax-only \
        -isystem "$inc" -I"$src/include" -I"$src/src" -I"$(dirname "$f")" "$f" || status=1
done
[ $status = 0 ] && echo "compiles against hiredis $(grep -E 'define HIREDIS_(MAJOR|MINOR|PATCH)' "$inc/hiredis/hiredis.h" | awk '{printf "%s.", $3}' | sed 's/\.$//')"
exit $status
