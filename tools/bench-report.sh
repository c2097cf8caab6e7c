#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs every rlock-bench scenario and writes the report's tables: what
# docs/performance.md shows, made again on whatever machine this runs on
# (an 8-core one, to check the wall-clock targets a 2-core VM cannot show).
#
#   tools/bench-report.sh [--out FILE] [--bench PATH] [-- RLOCK-BENCH ARGS...]
#
# --out: where the Markdown goes (default docs/bench-report.md; - for
# stdout). --bench: an rlock-bench already built (default: a Release
# build in build/release, made first, as bench/run.sh does). What follows
# -- goes to rlock-bench (--seconds 5, --pin, --redis URL, --quick, a
# list of scenarios). Each scenario's table has a column for each figure
# the bench reports in its JSON, so a figure added to the bench shows up
# here without a change.
set -euo pipefail
cd "$(dirname "$0")/.."
out=docs/bench-report.md
bench=
while [ $# -gt 0 ]; do
    case "$1" in
    --out) out=${2:?--out takes a file}; shift 2 ;;
    --bench) bench=${2:?--bench takes a path}; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '3,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "tools/bench-report.sh: unknown argument '$1'" >&2; exit 64 ;;
    esac
done
command -v python3 >/dev/null || { echo "tools/bench-report.sh: needs python3" >&2; exit 69; }
if [ -z "$bench" ]; then
    cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DRLOCK_BUILD_TESTS=OFF >/dev/null
    cmake --build build/release -j"$(nproc)" --target rlock-bench >/dev/null
    bench=build/release/bench/rlock-bench
fi
[ -x "$bench" ] || { echo "tools/bench-report.sh: no rlock-bench at $bench" >&2; exit 66; }

tmp=$(mktemp -d /tmp/rlock-bench-report-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
started=$(date -u '+%Y-%m-%d %H:%M UTC')
"$bench" --json "$@" > "$tmp/json" 2> "$tmp/tables" || {
    echo "tools/bench-report.sh: rlock-bench failed:" >&2
    tail -20 "$tmp/tables" >&2
    exit 1
}
server=$(command -v redis-server >/dev/null && redis-server --version | head -1 || echo "redis-server: not on PATH")
{
    echo "# rlock-bench report"
    echo
    echo "Made by \`tools/bench-report.sh${*:+ -- $*}\` on $started."
    echo
    echo "| machine | |"
    echo "|---|---|"
    echo "| CPUs (nproc) | $(nproc) |"
    echo "| CPU | $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || echo unknown) |"
    echo "| kernel | $(uname -sr) |"
    echo "| server | ${server} |"
    echo "| rlock | $("$bench" --version) |"
    echo
    echo "How to read each table, and the targets, are in docs/performance.md."
    python3 - "$tmp/json" <<'EOF'
import json, sys

doc = json.load(open(sys.argv[1]))
tables = {}
for item in doc.get("results", []):
    tables.setdefault(item["scenario"], []).append(item)

def cell(v):
    if isinstance(v, float):
        return "%.3f" % v if abs(v) < 1000 else "%.0f" % v
    return str(v)

for name, rows in tables.items():
    keys = []
    for r in rows:
        for k in r:
            if k != "scenario" and k not in keys:
                keys.append(k)
    print()
    print("## %s" % name)
    print()
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(cell(r.get(k, "")) for k in keys) + " |")
EOF
    echo
    echo "## The bench's own text"
    echo
    echo '```'
    cat "$tmp/tables"
    echo '```'
} > "$tmp/report"
if [ "$out" = - ]; then
    cat "$tmp/report"
else
    mv "$tmp/report" "$out"
    echo "tools/bench-report.sh: wrote $out"
fi
