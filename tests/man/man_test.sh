#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The manual: every public function of include/rlock/ (rlock.h, async.h
# and the adapters) has a man3
# page under its own name (a page of its own, or a .so link to its
# family's page, whose NAME section names it); every page renders without
# a warning from man(1) and is understood by lexgrog (whatis, apropos);
# after `cmake --install`, `man NAME` finds each of them and rlock(1).
#   man_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
tmp=$(mktemp -d /tmp/rlock-man-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

names=$(grep -ho '^RLOCK_API [^(]*(' "$src/include/rlock/rlock.h" "$src/include/rlock/async.h" |
    sed -E 's/.*[ *]([a-z_0-9]+)\($/\1/' | sort -u)
[ "$(echo "$names" | wc -l)" -ge 30 ] || fail "found only: $names"
# The adapters' functions (headers only: static inline).
adapters=$(grep -ho '^static inline int rlock_[a-z]*_attach(' "$src"/include/rlock/adapters/*.h |
    sed -E 's/.* (rlock_[a-z]*_attach)\($/\1/' | sort -u)
[ "$(echo "$adapters" | wc -l)" = 3 ] || fail "adapters: $adapters"
names=$(printf '%s\n%s\n' "$names" "$adapters" | sort -u)

cd "$src/man"
for n in $names; do
    page=man3/$n.3
    [ -f "$page" ] || fail "no man page for $n ($page)"
    lexgrog "$page" > "$tmp/whatis" || fail "lexgrog cannot read $page"
    grep -q "\"$n - " "$tmp/whatis" || fail "$page does not name $n: $(cat "$tmp/whatis")"
done
for page in man3/*.3 rlock.1; do
    MANWIDTH=80 LC_ALL=C.UTF-8 man --warnings -E UTF-8 -l "$page" \
        > "$tmp/out" 2> "$tmp/err" || fail "man cannot render $page"
    [ ! -s "$tmp/err" ] || fail "$page: $(cat "$tmp/err")"
    [ -s "$tmp/out" ] || fail "$page renders empty"
done

# Installed where man finds it.
cmake --install "$build" --prefix "$tmp/prefix" > /dev/null
export MANPATH=$tmp/prefix/share/man
for n in $names rlock; do
    man -w "$n" > /dev/null 2>&1 || fail "man $n: not found after install"
done
MANWIDTH=80 man rlock_mutex_trylock 2>/dev/null | grep "rlock_mutex_trylock" >/dev/null ||
    fail "man rlock_mutex_trylock does not show its page"
MANWIDTH=80 man 1 rlock 2>/dev/null | grep "rlock run" >/dev/null || fail "man 1 rlock"
echo "ok: $(echo "$names" | wc -l) functions, $(ls man3 | wc -l) pages"
