#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds a Release tree and runs rlock-bench on its own private
# redis-server; extra arguments go to rlock-bench (docs/performance.md).
#   bench/run.sh [--seconds S] [--json] [SCENARIO...]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DRLOCK_BUILD_TESTS=OFF >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null
exec build/release/bench/rlock-bench "$@"
