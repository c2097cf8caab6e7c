#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# rlock-bench keeps working: a smoke run with tiny counts on its own
# private redis-server, table and JSON. Not a measurement; the targets are
# read from real runs (docs/performance.md), never asserted here.
#   bench_smoke.sh RLOCK_BENCH
set -u
bench=$1
out=$(mktemp -d /tmp/rlock-bench-smoke-XXXXXX)
trap 'rm -rf "$out"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bench" --quick > "$out/text" 2> "$out/err" || fail "exit $?: $(cat "$out/err")"
grep -q '^uncontended: ' "$out/text" || fail "no uncontended table: $(cat "$out/text")"
grep -Eq '^  ratio +[0-9.]+ x the floor' "$out/text" || fail "no ratio: $(cat "$out/text")"
[ "$(grep -Ec '^  T=(1|2|4|8|16|64) ' "$out/text")" = 6 ] || fail "threads table: $(cat "$out/text")"
[ "$(grep -Ec '^        client CPU per pair, rlock / floor [0-9.]+ ' "$out/text")" = 6 ] ||
    fail "threads CPU lines: $(cat "$out/text")"
[ "$(grep -Ec '^  work +(0|1000) us  W=(1|2|4|8|16|64) ' "$out/text")" = 12 ] ||
    fail "contended table: $(cat "$out/text")"
[ "$(grep -Ec '^        hand-over .* wake-up floor p50 [0-9.]+ p99 [0-9.]+ ms' "$out/text")" = 12 ] ||
    fail "contended hand-over lines: $(cat "$out/text")"
[ "$(grep -Ec '^        fairness: max wait .* (met|NOT met); client CPU [0-9.]+ us/acq' "$out/text")" = 12 ] ||
    fail "contended fairness lines: $(cat "$out/text")"
# System calls per pair, counted by strace (installed by .ci/run and
# tools/deps.sh --tests): rlock's and the floor's rows.
if command -v strace >/dev/null; then
    grep -Eq '^   rlock +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.-]+ +[0-9.-]+ +[0-9.]+$' "$out/text" ||
        fail "syscalls table: $(cat "$out/text")"
    grep -Eq '^   rlock / floor: [0-9.]+ system calls a pair$' "$out/text" ||
        fail "syscalls ratio: $(cat "$out/text")"
fi
[ "$(grep -Ec '^  K=(100|1000) ' "$out/text")" = 2 ] || fail "scale table: $(cat "$out/text")"
grep -Eq 'wake-up after release p50 [0-9]+ us .* subscriber connections 4 ' "$out/text" ||
    fail "waiters: $(cat "$out/text")"
[ "$(grep -Ec '^  (redisson|token) +(peer|rlock) -> (rlock|peer) +p50 +[0-9]+ us' "$out/text")" = 3 ] ||
    fail "interop table: $(cat "$out/text")"

grep -Eq '^  requests each master got per pair: [0-9.]+ ' "$out/text" ||
    fail "redlock: $(cat "$out/text")"
# The event-loop API on one libevent loop (built with libevent: the CI's
# builds have it), or a line saying it was skipped.
if grep -q '^async: rlock-bench was built without libevent' "$out/text"; then
    echo "async scenario skipped: no libevent" >&2
else
    grep -Eq '^async holds: [0-9]+ taken in [0-9.]+ s; client heap [0-9]+ bytes per hold$' "$out/text" ||
        fail "async holds: $(cat "$out/text")"
    grep -Eq '^async renewals: [0-9]+ in [0-9.]+ s \([0-9.]+ ticks of [0-9]+\), 0 lost; loop CPU [0-9.]+ ms per tick' "$out/text" ||
        fail "async renewals: $(cat "$out/text")"
    grep -Eq '^async waiters: [0-9]+ queued in [0-9.]+ s; client heap [0-9]+ bytes per waiter$' "$out/text" ||
        fail "async waiters: $(cat "$out/text")"
    [ "$(grep -Ec '^async chains C=(1|16|256) +rlock +[0-9]+ pairs/s \(tokens on demand +[0-9]+\), hiredis async floor +[0-9]+ pairs/s: [0-9.]+x \([0-9.]+x\)$' "$out/text")" = 3 ] ||
        fail "async chains: $(cat "$out/text")"
fi

# The report: a table per scenario, from the bench's JSON.
report=$(dirname "$0")/../../tools/bench-report.sh
bash "$report" --bench "$bench" --out "$out/report.md" -- --quick uncontended redlock \
    > /dev/null || fail "bench-report.sh exit $?"
grep -q '^## uncontended$' "$out/report.md" && grep -q '^## redlock$' "$out/report.md" ||
    fail "report: $(cat "$out/report.md")"
grep -Eq '^\| 5 \| [0-9.]+ \| [0-9.]+ \|' "$out/report.md" || fail "report's redlock row: $(cat "$out/report.md")"
bash "$report" --bogus 2>/dev/null; [ $? = 64 ] || fail "bench-report.sh --bogus: want 64"

mkdir "$out/plot"
"$bench" --quick --plot "$out/plot" contended > /dev/null || fail "--plot exit $?"
[ "$(ls "$out/plot" | grep -c '^waits-w[0-9]*-work[0-9]*\.dat$')" = 12 ] ||
    fail "--plot wrote: $(ls "$out/plot")"

"$bench" --quick --json uncontended > "$out/json" 2> "$out/tables" || fail "--json exit $?"
head -c 1 "$out/json" | grep -q '{' || fail "JSON does not start with {: $(cat "$out/json")"
grep -q '"scenario": "uncontended"' "$out/json" || fail "JSON: $(cat "$out/json")"
grep -Eq '"ratio": [0-9.]+' "$out/json" || fail "JSON has no ratio: $(cat "$out/json")"
grep -q '"scenario": "threads"' "$out/json" && fail "threads ran though not asked for"
grep -q '^uncontended: ' "$out/tables" || fail "with --json the tables go to stderr"
tail -c 3 "$out/json" | grep -q ']}' || fail "JSON not closed: $(tail -c 50 "$out/json")"

# --pin: Redis on one CPU, the bench on the others, as the kernel reports
# them back; the threads table says how busy each side kept its cores.
"$bench" --pin --redis unix:///nonexistent threads 2>/dev/null; [ $? = 64 ] ||
    fail "--pin with --redis: want 64"
if [ "$(nproc)" -ge 2 ]; then
    "$bench" --quick --pin threads > "$out/pin" 2> "$out/err" || fail "--pin exit $?: $(cat "$out/err")"
    line=$(grep '^pinned: ' "$out/pin") || fail "--pin: no pinned line: $(cat "$out/pin")"
    [[ $line =~ ^pinned:\ redis-server\ on\ CPU\ ([0-9]+),\ the\ bench\ on\ CPU\ ([0-9,]+)$ ]] ||
        fail "--pin: $line"
    [[ ,${BASH_REMATCH[2]}, != *,${BASH_REMATCH[1]},* ]] || fail "--pin: Redis's CPU shared: $line"
    [ "$(grep -Ec '^        busy \(% of a core\) Redis rlock [0-9]+ protocol [0-9]+ floor [0-9]+; client ' "$out/pin")" = 6 ] ||
        fail "--pin: busy lines: $(cat "$out/pin")"
fi

"$bench" --bogus 2>/dev/null; [ $? = 64 ] || fail "--bogus: want 64"
"$bench" --seconds 0 2>/dev/null; [ $? = 64 ] || fail "--seconds 0: want 64"
"$bench" --holds 0 2>/dev/null; [ $? = 64 ] || fail "--holds 0: want 64"
"$bench" --sync-replicas -1 2>/dev/null; [ $? = 64 ] || fail "--sync-replicas -1: want 64"
"$bench" --sync-replicas 65 2>/dev/null; [ $? = 64 ] || fail "--sync-replicas 65: want 64"
"$bench" --sync-replicas x 2>/dev/null; [ $? = 64 ] || fail "--sync-replicas x: want 64"
echo "ok bench_smoke"
