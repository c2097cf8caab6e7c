#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds Valkey 8.1, the first server with SET ... IFEQ (the watchdog's
# native compare-and-set renewal), from Debian 13's source (the orig
# tarball of trixie's valkey package, its SHA-256 pinned here), into
# build/valkey-8.1, once; prints the path of its valkey-server. Debian 12
# has Valkey 8.0 at most. The build is plain `make` (no TLS, libc malloc:
# what the tests need), about 1.5 minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
version=8.1.1
tarball=valkey_${version}+dfsg1.orig.tar.xz
sha256=d9bbd82eecb82f359e649a0007ad3dc1b47cc15afa626348ca86b73c4ae2c7ee
url=http://deb.debian.org/debian/pool/main/v/valkey/$tarball
work=$PWD/build/valkey-8.1
bin=$work/valkey-$version/src/valkey-server
if [ ! -x "$bin" ] || ! "$bin" --version | grep "v=$version" >/dev/null; then
    rm -rf "$work"
    mkdir -p "$work"
    curl -fsSL --retry 3 --connect-timeout 30 --max-time 600 \
        -o "$work/$tarball" "$url" >&2
    echo "$sha256  $work/$tarball" | sha256sum -c --quiet - >&2
    tar -C "$work" -xJf "$work/$tarball"
    make -C "$work/valkey-$version" -j"$(nproc)" MALLOC=libc BUILD_TLS=no \
        valkey-server >"$work/build.log" 2>&1 ||
        { tail -30 "$work/build.log" >&2; exit 1; }
fi
echo "$bin"
