#!/usr/bin/env bash
# The README's second command: the whole test suite.
# Builds rlock twice - gcc optimised (-O2, where gcc's flow warnings live) with
# AddressSanitizer and UndefinedBehaviorSanitizer, clang unoptimised - both
# with warnings as errors, and runs every test of each build with CTest
# against real redis-server processes the tests start.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh

jobs=$(nproc)
for cc in gcc clang; do
    sanitize=OFF type=Debug
    [ "$cc" = gcc ] && sanitize=ON type=RelWithDebInfo
    cmake -S . -B "build/$cc" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=$type \
        -DRLOCK_WERROR=ON -DRLOCK_SANITIZE="$sanitize" >/dev/null
    cmake --build "build/$cc" -j"$jobs"
done
status=0
for cc in gcc clang; do
    echo "== tests, $cc build"
    ctest --test-dir "build/$cc" -j2 --output-on-failure || status=1
done
exit $status
