#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The ABI check (docs/releasing.md): compares the exported ABI of a fresh
# build of librlock.so with the committed baseline abi/librlock.abi.
#   tools/abi.sh            check; exit 1 on an incompatible change
#   tools/abi.sh --update   write the baseline from a fresh build
# Needs abigail-tools (abidw, abidiff). Only the types reachable from the
# public headers (include/rlock) count, and of those only what the headers
# define: the insides of the opaque handles (rlock_client, rlock_mutex,
# rlock_owner), defined in src/, are not ABI (--drop-private-types).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${RLOCK_ABI_BUILD:-build/abi}
baseline=abi/librlock.abi
# Fields added at the end of rlock_stats and rlock_event are compatible
# (docs/releasing.md).
suppressions=abi/librlock.suppr

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DRLOCK_BUILD_TESTS=OFF -DRLOCK_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" --target rlock -j2 >/dev/null
so=$(find "$build" -maxdepth 1 -name 'librlock.so.*.*' | head -1)
[ -n "$so" ] || { echo "tools/abi.sh: no librlock.so built in $build" >&2; exit 2; }

if [ "${1:-}" = --update ]; then
    abidw --no-corpus-path --no-comp-dir-path --headers-dir include/rlock \
        --drop-private-types --short-locs \
        --out-file "$baseline" "$so"
    echo "tools/abi.sh: wrote $baseline from $so"
    exit 0
fi

abidw --no-corpus-path --no-comp-dir-path --headers-dir include/rlock \
    --drop-private-types --short-locs \
    --out-file "$build/librlock.abi" "$so"
set +e
abidiff --suppressions "$suppressions" "$baseline" "$build/librlock.abi" \
    > "$build/abidiff.txt"
rc=$?
set -e
# abidiff's status is a bit field: 1 error, 2 usage, 4 an ABI change,
# 8 a change it is sure breaks callers (a removed symbol). A change of a
# struct's size or layout is only 4, and breaks callers too: any change but
# added functions and variables fails.
if (( rc & 3 )); then
    cat "$build/abidiff.txt" >&2
    echo "tools/abi.sh: abidiff failed (status $rc)" >&2
    exit 2
fi
if (( rc & 12 )); then
    changed=$(grep -E '^(Functions|Variables) changes summary:' "$build/abidiff.txt" |
        sed -E 's/.*: ([0-9]+) Removed, ([0-9]+) Changed.*/\1 \2/' |
        awk '{ n += $1 + $2 } END { print n + 0 }')
    if (( rc & 8 )) || [ "$changed" != 0 ] || ! grep -q 'changes summary' "$build/abidiff.txt"; then
        cat "$build/abidiff.txt" >&2
        echo "tools/abi.sh: the ABI changed incompatibly against $baseline." >&2
        echo "If it is deliberate, raise the version as docs/releasing.md says and run tools/abi.sh --update." >&2
        exit 1
    fi
    cat "$build/abidiff.txt"
    echo "tools/abi.sh: only additions; update the baseline with the release (tools/abi.sh --update)"
fi
echo "tools/abi.sh: ABI compatible with $baseline"
