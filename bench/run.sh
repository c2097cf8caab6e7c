#!/usr/bin/env bash
# Runs the benchmarks against a private redis-server (unix socket and TCP
# loopback), from a Release build.
#   bench/run.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DRLOCK_BUILD_TESTS=OFF >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null
dir=$(mktemp -d /tmp/rlock-bench-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])' 2>/dev/null || echo 16399)
trap 'kill $(cat "$dir/redis.pid") 2>/dev/null; sleep 0.2; rm -rf "$dir"' EXIT
redis-server --port "$port" --bind 127.0.0.1 --unixsocket "$dir/redis.sock" \
    --dir "$dir" --save "" --appendonly no --daemonize yes \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" >/dev/null
for _ in $(seq 100); do [ -S "$dir/redis.sock" ] && break; sleep 0.05; done
echo "== latency, unix socket";  build/release/bench/bench_latency "unix://$dir/redis.sock"
echo "== latency, TCP loopback"; build/release/bench/bench_latency "redis://127.0.0.1:$port"
echo "== contention, TCP loopback"
build/release/bench/bench_contention "redis://127.0.0.1:$port" 8 "$seconds" 1000
