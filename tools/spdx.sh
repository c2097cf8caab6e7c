#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Every source file of the tree names its license in an SPDX line.
#   tools/spdx.sh          check: list files without one, exit 1 if any
#   tools/spdx.sh --add    add the line where it is missing
# Source files: C, shell, Python, JavaScript, CMake, pkg-config, man pages,
# fuzz dictionaries, CI scripts. Data (corpora, JSON, images) and vendored
# node_modules are not source.
set -euo pipefail
cd "$(dirname "$0")/.."
line='SPDX-License-Identifier: BSD-3-Clause'
add=0
[ "${1:-}" = --add ] && add=1

files() {
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files -co --exclude-standard
    else # a tarball of the tree
        find . -path ./build -prune -o -type f -print | sed 's|^\./||'
    fi
}

sources() {
    files |
        grep -v -e '/node_modules/' -e '^fuzz/corpus/' -e '^fuzz/regressions/' |
        grep -E '(\.(c|h|sh|bash|py|cjs|js|lua|cmake|in|dict|1|3)|CMakeLists\.txt|^\.ci/run)$' |
        while read -r f; do [ -f "$f" ] && echo "$f"; done
}

missing=0
while read -r f; do
    head -5 "$f" | grep "$line" >/dev/null && continue
    if [ $add = 0 ]; then
        echo "no SPDX line: $f"
        missing=1
        continue
    fi
    case "$f" in
    *.c | *.h) text="/* $line */" ;;
    *.cjs | *.js) text="// $line" ;;
    *.lua) text="-- $line" ;;
    *.1 | *.3) text=".\\\" $line" ;;
    *) text="# $line" ;;
    esac
    if head -1 "$f" | grep '^#!' >/dev/null; then
        { head -1 "$f"; echo "$text"; tail -n +2 "$f"; } > "$f.spdx"
    else
        { echo "$text"; cat "$f"; } > "$f.spdx"
    fi
    chmod --reference="$f" "$f.spdx"
    mv "$f.spdx" "$f"
done < <(sources)
exit $missing
