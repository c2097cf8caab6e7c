#!/usr/bin/env bash
# The README's first command: install what is missing, build, run the demo.
# With no URL the demo starts a private redis-server of its own.
#   tools/demo.sh [redis://host:port]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DRLOCK_BUILD_TESTS=OFF >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null

if [ $# -gt 0 ]; then
    exec build/release/examples/contend "$1"
fi
dir=$(mktemp -d /tmp/rlock-demo-XXXXXX)
cleanup() {
    [ -f "$dir/redis.pid" ] && kill "$(cat "$dir/redis.pid")" 2>/dev/null || true
    sleep 0.2
    rm -rf "$dir"
}
trap cleanup EXIT
redis-server --port 0 --unixsocket "$dir/redis.sock" --unixsocketperm 700 \
    --dir "$dir" --save "" --appendonly no --daemonize yes \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null
for _ in $(seq 100); do [ -S "$dir/redis.sock" ] && break; sleep 0.05; done
build/release/examples/contend "unix://$dir/redis.sock"
