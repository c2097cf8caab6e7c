#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The event-loop API's examples, run as a user would run them, on a
# private redis-server (a unix socket in a temporary directory):
#  - two uv_lock processes at once (8 chains of 5 rounds each on one libuv
#    thread): every round gets the lock, no overlap within a process;
#  - two evhttp_lock servers serving one key: 16 concurrent requests, 8
#    to each, answer with critical sections that never overlap (across
#    the two processes: CLOCK_MONOTONIC is one clock on one machine) and
#    fencing tokens that grow in the order the sections ran; a request
#    for another key is served while they queue.
#   examples_test.sh EXAMPLES_DIR
set -u
dir=$1
tmp=$(mktemp -d /tmp/rlock-examples-XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

redis-server --port 0 --unixsocket "$tmp/redis.sock" --unixsocketperm 700 \
    --dir "$tmp" --save "" --appendonly no > "$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$tmp/redis.sock" ] && break; sleep 0.05; done
[ -S "$tmp/redis.sock" ] || fail "redis-server did not start: $(cat "$tmp/redis.log")"
url="unix://$tmp/redis.sock"

# uv_lock, twice at once.
"$dir/uv_lock" "$url" 8 5 > "$tmp/uv1" 2>&1 & u1=$!
"$dir/uv_lock" "$url" 8 5 > "$tmp/uv2" 2>&1 & u2=$!
wait $u1 || fail "uv_lock 1: $(tail -5 "$tmp/uv1")"
wait $u2 || fail "uv_lock 2: $(tail -5 "$tmp/uv2")"
for f in uv1 uv2; do
    grep -q '^uv_lock: 8 chains, 5 rounds each: 0 overlaps, 0 failures$' "$tmp/$f" ||
        fail "uv_lock: $(tail -3 "$tmp/$f")"
    [ "$(grep -c '^chain .* token ' "$tmp/$f")" = 40 ] || fail "uv_lock: not 40 rounds"
done

# evhttp_lock, two servers.
ports=()
for i in 1 2; do
    port=$(free_port)
    "$dir/evhttp_lock" "$url" "$port" 40 > "$tmp/ev$i.log" 2>&1 &
    pids+=($!)
    ports+=("$port")
done
for i in 1 2; do
    for _ in $(seq 100); do grep -q listening "$tmp/ev$i.log" && break; sleep 0.05; done
    grep -q listening "$tmp/ev$i.log" || fail "evhttp_lock $i: $(cat "$tmp/ev$i.log")"
done
for i in $(seq 8); do
    for port in "${ports[@]}"; do
        curl -sf "http://127.0.0.1:$port/work/a" > "$tmp/a.$port.$i" &
    done
done
sleep 0.1
curl -sf "http://127.0.0.1:${ports[0]}/work/b" > "$tmp/b" || fail "key b not served"
wait_start=$(date +%s)
while [ "$(cat "$tmp"/a.* 2>/dev/null | wc -l)" -lt 16 ]; do
    [ $(( $(date +%s) - wait_start )) -lt 30 ] || fail "only $(cat "$tmp"/a.* | wc -l) answers for key a"
    sleep 0.1
done
sort -k3,3n "$tmp"/a.* > "$tmp/a.sorted"
[ "$(wc -l < "$tmp/a.sorted")" = 16 ] || fail "answers: $(cat "$tmp"/a.*)"
# b was served while a's requests queued: its section began before the
# last of a's did.
b_start=$(awk '{print $3}' "$tmp/b")
last_a=$(tail -1 "$tmp/a.sorted" | awk '{print $3}')
[ "$b_start" -lt "$last_a" ] || fail "key b waited for key a"
awk '
    NR > 1 && $3 < end { print "overlap: " prev " and " $0; bad = 1 }
    NR > 1 && $2 <= token { print "token not larger: " prev " then " $0; bad = 1 }
    { end = $4; token = $2; prev = $0 }
    END { exit bad }' "$tmp/a.sorted" || fail "key a's critical sections: $(cat "$tmp/a.sorted")"
for port in "${ports[@]}"; do curl -sf "http://127.0.0.1:$port/quit" > /dev/null; done
echo "ok: uv_lock 2 x 40 rounds; evhttp_lock 16 sections of one key over 2 servers, in order, no overlap"
