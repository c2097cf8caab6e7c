#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The CI matrix beyond the README's test command (.ci/run runs both):
#   tools/matrix.sh hiredis   rlock built against hiredis 1.2.0, built from
#                             Debian's own source package (trixie's) into a
#                             temporary prefix; the library, the tool and
#                             every test that talks to a server run
#                             against it.
#   tools/matrix.sh valkey    the whole test suite (gcc -O2 build) with
#                             valkey-server (Valkey 8, Debian 12's
#                             backports) as every test's server
#                             (RLOCK_TEST_SERVER).
# Needs root for apt when something is missing. Build trees: build/matrix-*.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
jobs=$(nproc)
what=${1:?usage: tools/matrix.sh hiredis|valkey}
# The tests of what only newer servers have run them in every build
# (built once, tools/test-servers.sh).
. tools/test-servers.sh


case "$what" in
hiredis)
    work=$PWD/build/matrix-hiredis
    prefix=$work/prefix
    if [ ! -f "$prefix/lib/pkgconfig/hiredis.pc" ]; then
        rm -rf "$work/src" "$work/apt"
        mkdir -p "$work/apt/lists/partial" "$work/apt/archives/partial" "$work/src"
        # A private apt configuration: trixie's source packages only, so
        # the machine's own sources stay as they are.
        echo "deb-src http://deb.debian.org/debian trixie main" > "$work/apt/sources.list"
        opts=(-o "Dir::Etc::SourceList=$work/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache::Archives=$work/apt/archives"
              -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
        [ "$(id -u)" = 0 ] && opts+=(-o APT::Sandbox::User=root)
        command -v dpkg-source >/dev/null || apt-get install -y -q --no-install-recommends dpkg-dev
        apt-get "${opts[@]}" -q update >/dev/null
        (cd "$work/src" && apt-get "${opts[@]}" -q source --download-only hiredis >/dev/null)
        dsc=$(ls "$work"/src/hiredis_*.dsc)
        dpkg-source -x "$dsc" "$work/src/hiredis" >/dev/null
        make -C "$work/src/hiredis" -j"$jobs" PREFIX="$prefix" LIBRARY_PATH=lib \
            USE_SSL=0 install >/dev/null
    fi
    version=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --modversion hiredis)
    case "$version" in 1.2.*) ;; *) echo "tools/matrix.sh: built hiredis $version, want 1.2.x" >&2; exit 1 ;; esac
    echo "== matrix: hiredis $version (Debian source package), in $prefix"
    PKG_CONFIG_PATH=$prefix/lib/pkgconfig cmake -S . -B build/matrix-hiredis/build \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRLOCK_WERROR=ON -DRLOCK_ADAPTERS=on \
        -DRLOCK_CARES=on -DCMAKE_BUILD_RPATH="$prefix/lib" >/dev/null
    cmake --build build/matrix-hiredis/build -j"$jobs"
    # The library really is linked against that hiredis.
    ldd build/matrix-hiredis/build/librlock.so | grep "$prefix/lib/libhiredis.so.1" >/dev/null ||
        { echo "tools/matrix.sh: librlock.so is not linked against $prefix" >&2; ldd build/matrix-hiredis/build/librlock.so >&2; exit 1; }
    LD_LIBRARY_PATH=$prefix/lib ctest --test-dir build/matrix-hiredis/build -j2 \
        --output-on-failure \
        -E '^(cli_valgrind_.*|compiles_against_hiredis_1x|install_find_package_pkg_config)$'
    # (Not the valgrind copies of CLI cases, which test the tool's memory,
    # not the connection layer; not the compile check of 1.x headers or
    # the install check, which use the system's hiredis by design.)
    ;;
valkey)
    if ! command -v valkey-server >/dev/null; then
        # Valkey 8 is in Debian 12's backports.
        if ! grep -rqs bookworm-backports /etc/apt/sources.list /etc/apt/sources.list.d/; then
            printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
                > /etc/apt/sources.list.d/bookworm-backports.sources
            apt-get update -q >/dev/null
        fi
        apt-get install -y -q --no-install-recommends -t bookworm-backports valkey-server valkey-tools >/dev/null
    fi
    echo "== matrix: $(valkey-server --version)"
    cmake -S . -B build/matrix-valkey -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRLOCK_WERROR=ON \
        -DRLOCK_ADAPTERS=on -DRLOCK_CARES=on >/dev/null
    cmake --build build/matrix-valkey -j"$jobs"
    RLOCK_TEST_SERVER=valkey-server ctest --test-dir build/matrix-valkey -j2 \
        --output-on-failure
    ;;
*)
    echo "usage: tools/matrix.sh hiredis|valkey" >&2
    exit 64
    ;;
esac
