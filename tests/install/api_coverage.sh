#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Checks that the bad-input table (tests/test_bad_input.c) covers the whole
# public API: every function the header declares with RLOCK_API is in the
# test's api_functions[] list and has at least one ROW*() in the table, and
# the list names no function the header lacks.
#   api_coverage.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: api_coverage.sh SOURCE_DIR}
header=$src/include/rlock/rlock.h
test=$src/tests/test_bad_input.c
tmp=$(mktemp -d /tmp/rlock-api-coverage-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# "RLOCK_API rlock_client *rlock_client_open(const char *url," -> the name.
grep -E '^RLOCK_API ' "$header" |
    sed -E 's/^RLOCK_API [^(]*[ *](rlock_[A-Za-z0-9_]+)\(.*/\1/' |
    sort -u > "$tmp/header"
# The quoted names between "api_functions[] = {" and "};".
sed -n '/api_functions\[\] = {/,/^};/p' "$test" |
    grep -oE '"rlock_[A-Za-z0-9_]+"' | tr -d '"' | sort -u > "$tmp/list"
# The first argument of every row macro: ROW(rlock_x, ...), ROWN(...), ...
# (clang-format may break the line after the parenthesis).
tr '\n' ' ' < "$test" |
    grep -oE '\<ROW[A-Z_]*\( *rlock_[A-Za-z0-9_]+,' |
    sed -E 's/.*\( *(rlock_[A-Za-z0-9_]+),/\1/' > "$tmp/row-names"
sort -u "$tmp/row-names" > "$tmp/rows"

[ -s "$tmp/header" ] || { echo "no RLOCK_API declaration found in $header" >&2; exit 1; }
[ "$(wc -l < "$tmp/header")" = "$(grep -cE '^RLOCK_API ' "$header")" ] || {
    echo "an RLOCK_API declaration of $header was not understood:" >&2
    grep -E '^RLOCK_API ' "$header" | grep -vE '[ *]rlock_[A-Za-z0-9_]+\(' >&2
    exit 1
}

status=0
report() { # report FILE WHAT
    local name
    while read -r name; do
        echo "api_coverage: $name $2" >&2
        status=1
    done < "$1"
}
comm -23 "$tmp/header" "$tmp/list" > "$tmp/unlisted"
comm -13 "$tmp/header" "$tmp/list" > "$tmp/stale"
comm -23 "$tmp/header" "$tmp/rows" > "$tmp/rowless"
report "$tmp/unlisted" "is declared RLOCK_API in rlock.h but missing from api_functions[] in test_bad_input.c"
report "$tmp/stale" "is in api_functions[] of test_bad_input.c but not declared RLOCK_API in rlock.h"
report "$tmp/rowless" "is declared RLOCK_API in rlock.h but has no row in the bad-input table"

# The event-loop API (async.h): every function is called with bad input
# in test_async.c's async_bad_input_is_refused_and_changes_nothing.
grep -E '^RLOCK_API ' "$src/include/rlock/async.h" |
    sed -E 's/^RLOCK_API [^(]*[ *](rlock_[A-Za-z0-9_]+)\(.*/\1/' |
    sort -u > "$tmp/async"
[ -s "$tmp/async" ] || { echo "no RLOCK_API declaration found in async.h" >&2; exit 1; }
sed -n '/^TEST(async_bad_input_is_refused_and_changes_nothing)/,/^}/p' \
    "$src/tests/test_async.c" > "$tmp/async-test"
[ -s "$tmp/async-test" ] || { echo "no async_bad_input test in test_async.c" >&2; exit 1; }
sed -n '/^static void \*other_main/,/^}/p' "$src/tests/test_async.c" >> "$tmp/async-test"
while read -r name; do
    grep -q "\<$name(" "$tmp/async-test" || {
        echo "api_coverage: $name is declared RLOCK_API in async.h but async_bad_input_is_refused_and_changes_nothing never calls it" >&2
        status=1
    }
done < "$tmp/async"

if [ $status = 0 ]; then
    while read -r name; do
        printf '%-28s %s rows\n' "$name" "$(grep -cx "$name" "$tmp/row-names")"
    done < "$tmp/header"
    echo "api_coverage: all $(wc -l < "$tmp/header") RLOCK_API functions have rows; all $(wc -l < "$tmp/async") of async.h are called with bad input"
fi
exit $status
