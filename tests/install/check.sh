#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installs the build into a temporary prefix and builds a program against it
# twice: with find_package(rlock) and with pkg-config. Checks that only the
# rlock_ API is exported from the shared library.
#   check.sh SOURCE_DIR BUILD_DIR C_COMPILER
set -euo pipefail
src=$1 build=$2 cc=$3
# A sanitizer build of the library needs its runtime loaded first.
export ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0
prefix=$(mktemp -d /tmp/rlock-install-XXXXXX)
trap 'rm -rf "$prefix"' EXIT

cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/include/rlock/rlock.h"
# rlock-bench is a development tool: installed only on request.
if [ -e "$prefix/bin/rlock-bench" ]; then
    echo "rlock-bench was installed by default" >&2
    exit 1
fi
test -x "$prefix/bin/rlock"
cmake --install "$build" --prefix "$prefix" --component bench >/dev/null
test -x "$prefix/bin/rlock-bench"
# Only the library's component: the shared library and its SONAME link,
# nothing to build with.
cmake --install "$build" --prefix "$prefix/lib-only" --component lib >/dev/null
test -z "$(find "$prefix/lib-only" -name '*.h' -o -name '*.a' -o -name 'librlock.so')"
test -n "$(find "$prefix/lib-only" -name 'librlock.so.0')"
test -f "$prefix/include/rlock/version.h"
libdir=$(dirname "$(find "$prefix" -name rlock.pc)")/..
test -f "$libdir/cmake/rlock/rlockConfig.cmake"

cmake -S "$src/tests/install" -B "$prefix/consumer" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer" >/dev/null
LD_LIBRARY_PATH="$libdir" "$prefix/consumer/consumer"

PKG_CONFIG_PATH="$libdir/pkgconfig" "$cc" -o "$prefix/pc-consumer" \
    "$src/tests/install/consumer.c" \
    $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs rlock)
LD_LIBRARY_PATH="$libdir" "$prefix/pc-consumer"

# Only rlock_ symbols are exported.
bad=$(nm -D --defined-only "$libdir"/librlock.so | awk '{print $3}' |
      grep -v '^rlock_' | grep -v '^_' || true)
if [ -n "$bad" ]; then
    echo "exported non-API symbols: $bad" >&2
    exit 1
fi
echo "install check passed"
