#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The README's first command: install what is missing, build, run the demo.
# Without a URL, `rlock demo` starts a private redis-server of its own on a
# unix socket in a temporary directory, and removes it afterwards.
#   tools/demo.sh [redis://host:port]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DRLOCK_BUILD_TESTS=OFF >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null
if [ $# -gt 0 ]; then
    exec build/release/cli/rlock --redis "$1" demo
fi
exec build/release/cli/rlock demo
