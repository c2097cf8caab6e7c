#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds the newest server Debian has, for the tests of what only newer
# servers have (the native compare-and-delete release):
#   tools/newserver.sh valkey   sid's valkey (9.x: DELIFEQ)
#   tools/newserver.sh redis    experimental's redis (8.4 and later: DELEX)
# The source comes from deb.debian.org, signature and checksums checked
# (tools/debsrc.sh); the build is plain `make` of the server alone (no TLS,
# libc malloc: what the tests need), into build/NAME-SUITE, once per
# version: about two minutes on two cores. Prints the server's path.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
valkey) suite=sid ;;
redis) suite=experimental ;;
*) echo "usage: $0 valkey|redis" >&2; exit 2 ;;
esac
name=$1
work=$PWD/build/$name-$suite
read -r version tarball < <(tools/debsrc.sh "$suite" "$name" "$work/dl")
src=$work/$name-$version
bin=$src/src/$name-server
if [ ! -x "$bin" ] || ! "$bin" --version | grep "v=$version" >/dev/null; then
    rm -rf "$src"
    mkdir -p "$src"
    tar -C "$src" --strip-components=1 -xf "$tarball"
    make -C "$src" -j"$(nproc)" MALLOC=libc BUILD_TLS=no "$name-server" \
        >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; exit 1; }
fi
echo "$bin"
