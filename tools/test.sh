#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The README's second command: the whole test suite, three ways, each built
# with warnings as errors, every test run by CTest against real redis-server
# processes the tests start.
#   A  gcc -O2 (RelWithDebInfo: gcc's flow warnings need the optimiser), no
#      sanitizer: every test, among them cli_valgrind_*, a few rlock(1)
#      cases under valgrind's memcheck.
#   B  clang Debug with AddressSanitizer and UndefinedBehaviorSanitizer:
#      every test but the install check (a program that is not sanitized
#      cannot link a library that is; build A runs it).
#   C  clang with ThreadSanitizer: the tests labelled "threads", those with
#      a process of more than one thread (nearly all).
#   D  the libFuzzer targets (tools/fuzz.sh), RLOCK_FUZZ_SECONDS (default
#      60) each, from the checked-in corpus; every past crash is replayed by
#      A, B and C already (fuzz_*_corpus).
#   E  the ABI check (tools/abi.sh): the exported ABI against the committed
#      baseline abi/librlock.abi (docs/releasing.md).
# In A, B and C the schedule explorer (tests/explore, docs/testing.md)
# replays its kept seeds and runs new schedules for RLOCK_EXPLORE_SECONDS
# (90 s in A, 60 s in B and C by default); run rlock-explore by hand for
# longer.
# Every server is redis-server (Debian 12's Redis 7.0), but for the tests of
# what only newer servers have, which run Valkey 8.1 built from Debian 13's
# source, and the newest Valkey and Redis from Debian's sid and
# experimental sources (tools/test-servers.sh).
# --busy (or RLOCK_TEST_BUSY=1): the whole run beside two CPU-bound
# processes (`yes > /dev/null` twice), as on a machine loaded by other
# work; the suite must pass that way too.
# Any sanitizer report fails the run. A process stops at its first report
# with a non-zero status; since not every status is looked at (rlock(1) in a
# pipe, a test's forked child), every report also goes to a file, and any
# such file fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
busy=${RLOCK_TEST_BUSY:-0}
[ "${1:-}" = --busy ] && busy=1
tools/deps.sh --tests
# Newer servers for the tests of the native renewal and release.
. tools/test-servers.sh

load_pids=()
if [ "$busy" = 1 ]; then
    for _ in 1 2; do
        yes > /dev/null &
        load_pids+=($!)
    done
    echo "== busy mode: two CPU-bound processes run beside the suite (${load_pids[*]})"
fi
stop_load() { [ ${#load_pids[@]} -eq 0 ] || kill "${load_pids[@]}" 2>/dev/null || true; }
trap stop_load EXIT

jobs=$(nproc)
t_start=$(date +%s)
since() { echo "$(( $(date +%s) - $1 )) s"; }

build() { # DIR COMPILER BUILD_TYPE SANITIZE
    cmake -S . -B "$1" -DCMAKE_C_COMPILER="$2" -DCMAKE_BUILD_TYPE="$3" \
        -DRLOCK_WERROR=ON -DRLOCK_SANITIZE="$4" -DRLOCK_ADAPTERS=on \
        -DRLOCK_CARES=on >/dev/null
    cmake --build "$1" -j"$jobs"
}
build build/vg gcc RelWithDebInfo OFF
build build/asan-clang clang Debug address
build build/tsan clang RelWithDebInfo thread
echo "== built A, B and C in $(since "$t_start")"

reports=$(mktemp -d /tmp/rlock-sanitizer-XXXXXX)
trap 'rm -rf "$reports"; stop_load' EXIT
# These make every report fatal and keep it; none hides a report.
#  - halt_on_error: stop at the first report, with status 1 (ASan, UBSan)
#    or exitcode=66 (TSan).
#  - log_path: each process writes its reports to PATH.EXE.PID.
#  - TSan's io_sync=0: reads and writes of sockets and pipes order nothing
#    between threads. By default TSan takes a write to any socket and a read
#    from any other as synchronisation, which hid a race in the harness.
#  - TSan's die_after_fork=0: some tests fork a child from a process that
#    has threads, and the child starts a client's background thread, as the
#    library says it may. TSan cannot model such a child: by default it
#    kills it when it starts a thread; with 0 it lets it run, checking none
#    of its threads. The parent is checked as ever, and children forked
#    before their parent had a second thread are checked in full.
asan_env=(
    "ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:log_path=$reports/asan:log_exe_name=1"
    "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan:log_exe_name=1"
)
tsan_env=(
    "TSAN_OPTIONS=halt_on_error=1:exitcode=66:io_sync=0:die_after_fork=0:second_deadlock_stack=1:log_path=$reports/tsan:log_exe_name=1"
)

# The schedule explorer (docs/testing.md) runs a bounded time in each
# build; a sanitizer's build is slower, so its calls get more slack.
export RLOCK_EXPLORE_SECONDS=${RLOCK_EXPLORE_SECONDS:-90}
export RLOCK_EXPLORE_SLACK_MS=1000
status=0
run() { # NAME CTEST-ARGS...
    local name=$1 t0
    shift
    t0=$(date +%s)
    echo "== tests, build $name"
    ctest "$@" -j2 --output-on-failure || status=1
    echo "== build $name: tests took $(since "$t0")"
}
run "A (gcc -O2; valgrind)" --test-dir build/vg
RLOCK_EXPLORE_SECONDS=$(( RLOCK_EXPLORE_SECONDS * 2 / 3 ))
RLOCK_EXPLORE_SLACK_MS=2500
export "${asan_env[@]}"
run "B (clang; ASan+UBSan)" --test-dir build/asan-clang \
    -E '^install_find_package_pkg_config$'
unset ASAN_OPTIONS UBSAN_OPTIONS
export "${tsan_env[@]}"
run "C (clang; TSan)" --test-dir build/tsan -L '^threads$'
unset TSAN_OPTIONS
t0=$(date +%s)
echo "== D: fuzzing, ${RLOCK_FUZZ_SECONDS:-60} s per target"
tools/fuzz.sh "${RLOCK_FUZZ_SECONDS:-60}" || status=1
echo "== D: fuzzing took $(since "$t0")"
echo "== E: ABI check"
tools/abi.sh || status=1

if [ -n "$(ls -A "$reports")" ]; then
    status=1
    for f in "$reports"/*; do
        echo "== sanitizer report: $(basename "$f")"
        cat "$f"
    done
fi
echo "== all builds and tests: $(since "$t_start")"
exit $status
