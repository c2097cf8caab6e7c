#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Fuzzes the parsers rlock owns (fuzz/README.md): builds build/fuzz with
# clang, libFuzzer, AddressSanitizer and UndefinedBehaviorSanitizer, then
# runs each target for SECONDS (default 60) on a temporary copy of its seed
# corpus (fuzz/corpus/<target> is never modified), with every past crash
# (fuzz/regressions/<target>) as extra input.
#
#   tools/fuzz.sh [SECONDS [TARGET...]]      TARGET: url, duration, reply
#
# Exits 0 if no target crashed or broke a check. Otherwise prints, for each
# reproducer, its path and how to replay it, keeps the temporary directory,
# and exits 1. Exits 2 if clang cannot link libFuzzer (on Debian 12 its
# runtime is in libclang-rt-14-dev, which clang only recommends).
set -euo pipefail
cd "$(dirname "$0")/.."

secs=${1:-60}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(url duration reply)
case "$secs" in
'' | *[!0-9]*) echo "usage: tools/fuzz.sh [SECONDS [TARGET...]]" >&2; exit 2 ;;
esac

work=$(mktemp -d /tmp/rlock-fuzz-XXXXXX)
keep=0
trap '[ $keep = 1 ] || rm -rf "$work"' EXIT

cat >"$work/probe.c" <<'EOF'
int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n);
int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n)
{
    (void)d;
    (void)n;
    return 0;
}
EOF
if ! clang -fsanitize=fuzzer,address,undefined "$work/probe.c" \
        -o "$work/probe" 2>"$work/probe.log"; then
    cat "$work/probe.log" >&2
    echo "clang cannot link libFuzzer: install libclang-rt-14-dev" >&2
    exit 2
fi

jobs=$(nproc)
[ "$jobs" -gt 2 ] && jobs=2
cmake -S . -B build/fuzz -DCMAKE_C_COMPILER=clang \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRLOCK_FUZZ=ON -DRLOCK_WERROR=ON \
    -DRLOCK_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/fuzz -j"$jobs" \
    --target "${targets[@]/#/fuzz_}" >/dev/null

status=0
for t in "${targets[@]}"; do
    bin=build/fuzz/fuzz/fuzz_$t
    dir=$work/$t
    mkdir -p "$dir/corpus" "$dir/crashes"
    cp -R "fuzz/corpus/$t/." "$dir/corpus/"
    dict=()
    [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
    echo "== fuzz_$t: ${secs}s"
    if "$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 "${dict[@]}" -artifact_prefix="$dir/crashes/" \
        "$dir/corpus" "fuzz/regressions/$t" >"$dir/log" 2>&1; then
        awk '/^stat::number_of_executed_units:/ { n = $NF }
             /^stat::average_exec_per_sec:/ { r = $NF }
             /^stat::peak_rss_mb:/ { m = $NF }
             END { printf "   %d execs, %d/s, peak RSS %d MB, ok\n",
                   n, r, m }' "$dir/log"
    else
        status=1
        keep=1
        grep -E -A 30 'ERROR|invariant violated|runtime error' "$dir/log" |
            head -25 || tail -25 "$dir/log"
        for f in "$dir"/crashes/*; do
            [ -e "$f" ] || continue
            echo "reproducer: $f"
            echo "   replay:  $bin $f"
            echo "   keep it: cp $f fuzz/regressions/$t/<what-it-shows>"
        done
        echo "   log: $dir/log"
    fi
done
exit $status
