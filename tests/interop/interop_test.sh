#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# rlock sharing locks with other languages' clients on one real
# redis-server:
#  - the token layout (--layout token) with redis-py's Lock (Debian's
#    python3-redis), node-redlock v5 and v4 (npm, with ioredis; installed
#    in tests/interop/node by tools/deps.sh --tests) and a PHP client
#    written the way the seeds and countless blog posts do it (SET NX PX,
#    then a compare-and-delete script, with php-redis);
#  - the Redisson layout (--layout redisson) with redisson_peer.py, which
#    plays Redisson's RLock on the wire (Redisson itself needs a JVM and
#    Maven Central, which these machines do not reach).
# Each side does a deliberately non-atomic read-modify-write of a counter
# file under the lock and logs "B id" / "E id" around it; the count must
# come out exact and the log must never show two holders.
#   interop_test.sh CASE      (RLOCK_BIN: the rlock tool)
set -uo pipefail

RLOCK=${RLOCK_BIN:?set RLOCK_BIN to the rlock tool}
PYTHON=/usr/bin/python3 # Debian's, which has python3-redis
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/rlock-interop-XXXXXX)
redis_pid=

cleanup() {
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

start_redis() {
    setpriv --pdeathsig KILL "${RLOCK_TEST_SERVER:-redis-server}" --port 0 \
        --unixsocket "$dir/redis.sock" --unixsocketperm 700 --dir "$dir" \
        --save "" --appendonly no >"$dir/redis.log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 200); do
        redis-cli -s "$dir/redis.sock" ping >/dev/null 2>&1 && break
        sleep 0.05
    done
    redis-cli -s "$dir/redis.sock" ping >/dev/null 2>&1 || fail "redis-server did not start"
    export RLOCK_URL="unix://$dir/redis.sock"
}

# The critical section every side runs: log, read, pause, write, log.
cat > "$dir/section.sh" <<'SH'
#!/bin/sh
# section.sh DIR ID
echo "B $2" >> "$1/log"
read n < "$1/f"
sleep 0.005
echo $((n + 1)) > "$1/f"
echo "E $2" >> "$1/log"
SH
chmod +x "$dir/section.sh"

cat > "$dir/peer.py" <<'PY'
import subprocess, sys
import redis

sock, d, ident, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
r = redis.Redis(unix_socket_path=sock)
for _ in range(runs):
    # redis-py's Lock: SET name token NX PX, released by compare-and-delete.
    lock = r.lock("counter", timeout=10, blocking_timeout=60, sleep=0.005)
    if not lock.acquire():
        sys.exit("redis-py: lock not obtained")
    try:
        subprocess.run([d + "/section.sh", d, ident], check=True)
    finally:
        lock.release()
PY

cat > "$dir/peer.php" <<'PHP'
<?php
// The seeds' way: SET key token NX PX, then compare-and-delete in Lua.
[$_, $sock, $d, $id, $runs] = $argv;
$r = new Redis();
$r->connect($sock);
$release = "if redis.call('get', KEYS[1]) == ARGV[1] then " .
           "return redis.call('del', KEYS[1]) else return 0 end";
for ($i = 0; $i < (int)$runs; $i++) {
    $token = bin2hex(random_bytes(16));
    $deadline = microtime(true) + 60;
    while (!$r->set('counter', $token, ['nx', 'px' => 10000])) {
        if (microtime(true) > $deadline) { fwrite(STDERR, "php: no lock\n"); exit(1); }
        usleep(random_int(2000, 10000));
    }
    system(escapeshellarg("$d/section.sh") . " " . escapeshellarg($d) . " $id", $rc);
    if ($rc !== 0) exit(1);
    if ($r->eval($release, ['counter', $token], 1) !== 1) { fwrite(STDERR, "php: lost\n"); exit(1); }
}
PHP

rlock_worker() { # rlock_worker ID RUNS LAYOUT
    local i
    for i in $(seq "$2"); do
        "$RLOCK" run --layout "$3" counter -- "$dir/section.sh" "$dir" "$1" || exit 1
    done
}

# Every B is followed by the E of the same holder.
check_log() {
    awk '
        $1 == "B" { if (open != "") { print "overlap: " open " and " $2; bad = 1 } open = $2 }
        $1 == "E" { if (open != $2) { print "end of " $2 " while " open " held"; bad = 1 } open = "" }
        END { exit bad }' "$dir/log" || fail "two holders at once (log above)"
}

# run_mixed PEER: 3 rlock workers and 3 PEER workers, 8 sections each,
# on the lock "counter".
run_mixed() {
    local pids="" failed=0 p w runs=8 layout=token t0=$SECONDS
    [ "$1" = redisson ] && layout=redisson
    echo 0 > "$dir/f"
    : > "$dir/log"
    for w in 1 2 3; do
        rlock_worker "rlock$w" $runs $layout &
        pids="$pids $!"
        case $1 in
        python) "$PYTHON" "$dir/peer.py" "$dir/redis.sock" "$dir" "peer$w" $runs & ;;
        php) php "$dir/peer.php" "$dir/redis.sock" "$dir" "peer$w" $runs & ;;
        node-v5) node "$here/node/peer.cjs" v5 "$dir/redis.sock" "$dir" "peer$w" $runs & ;;
        node-v4) node "$here/node/peer.cjs" v4 "$dir/redis.sock" "$dir" "peer$w" $runs & ;;
        redisson) "$PYTHON" "$here/redisson_peer.py" "$dir/redis.sock" work "$dir" "peer$w" $runs & ;;
        esac
        pids="$pids $!"
    done
    for p in $pids; do wait "$p" || failed=1; done
    [ $failed = 0 ] || fail "a worker failed"
    [ "$(cat "$dir/f")" = $((6 * runs)) ] ||
        fail "counter is $(cat "$dir/f"), want $((6 * runs))"
    check_log
    grep -q "^B peer" "$dir/log" || fail "the peer never held the lock"
    grep -q "^B rlock" "$dir/log" || fail "rlock never held the lock"
    [ "$(redis-cli -s "$dir/redis.sock" exists counter)" = 0 ] || fail "lock left behind"
    echo "$1: $((6 * runs)) sections, exact count, no overlap, $((SECONDS - t0)) s"
}

need_node_redlock() {
    command -v node >/dev/null || fail "node is not installed (tools/deps.sh --tests)"
    [ -d "$here/node/node_modules/redlock" ] && [ -d "$here/node/node_modules/redlock4" ] ||
        fail "node-redlock is not installed in $here/node (tools/deps.sh --tests)"
}

case_python_redis_lock_and_rlock_exclude_each_other() {
    "$PYTHON" -c 'import redis' || fail "python3-redis is not installed"
    start_redis
    run_mixed python
    # rlock sees the peer's lock, and the peer rlock's.
    "$PYTHON" - "$dir/redis.sock" <<'PY' &
import sys, time, redis
r = redis.Redis(unix_socket_path=sys.argv[1])
with r.lock("held", timeout=5):
    time.sleep(1.5)
PY
    local peer=$!
    for _ in $(seq 100); do
        [ "$(redis-cli -s "$dir/redis.sock" exists held)" = 1 ] && break
        sleep 0.02
    done
    "$RLOCK" run -n --layout token held -- true 2>/dev/null
    [ $? = 1 ] || fail "rlock took a lock redis-py holds"
    "$RLOCK" status --layout token held | grep "held by" >/dev/null || fail "status does not show the peer"
    wait "$peer"
    "$RLOCK" run --layout token held -- "$PYTHON" -c '
import sys, redis
r = redis.Redis(unix_socket_path=sys.argv[1])
sys.exit(0 if not r.lock("held", timeout=5).acquire(blocking=False) else 3)' "$dir/redis.sock" ||
        fail "redis-py took a lock rlock holds"
}

case_php_set_nx_px_client_and_rlock_exclude_each_other() {
    php -r 'exit(class_exists("Redis") ? 0 : 1);' || fail "php-redis is not installed"
    start_redis
    run_mixed php
}

case_node_redlock_v5_and_rlock_exclude_each_other() {
    need_node_redlock
    start_redis
    run_mixed node-v5
}

case_node_redlock_v4_and_rlock_exclude_each_other() {
    need_node_redlock
    start_redis
    run_mixed node-v4
}

rcli() { redis-cli -s "$dir/redis.sock" "$@"; }

# Waits until FILE has a line LINE (at most 10 s).
wait_line() {
    local _
    for _ in $(seq 500); do
        grep -qx "$2" "$1" 2>/dev/null && return 0
        sleep 0.02
    done
    fail "no '$2' in $1: $(cat "$1" 2>/dev/null)"
}

case_redisson_peer_and_rlock_exclude_and_wake_each_other() {
    local peer out
    "$PYTHON" -c 'import redis' || fail "python3-redis is not installed"
    start_redis
    run_mixed redisson

    # A Redisson hold taken twice: rlock sees it, with its count, and gets
    # the lock only after the second unlock.
    # The peer and rlock's COMMAND both write to $dir/peer: both append
    # (O_APPEND), or the peer's own file offset would let its "unlocked 0"
    # overwrite a "got" that COMMAND appended first (it did, on a busy
    # machine).
    : > "$dir/peer"
    "$PYTHON" "$here/redisson_peer.py" "$dir/redis.sock" hold held 2 1 >> "$dir/peer" &
    peer=$!
    wait_line "$dir/peer" held
    out=$("$RLOCK" status --layout redisson held)
    echo "$out" | grep -Eq "^held: held by [0-9a-f-]{36}:[0-9]+, count 2, " ||
        fail "status does not show the peer's hold: $out"
    "$RLOCK" run -n --layout redisson held -- true 2>/dev/null
    [ $? = 1 ] || fail "rlock took a lock the peer holds"
    "$RLOCK" run -w 20s --layout redisson held -- sh -c "echo got >> '$dir/peer'" ||
        fail "rlock did not get the lock after the peer's release"
    wait "$peer" || fail "the peer failed"
    [ "$(grep -n -x -e 'unlocking 2' -e got "$dir/peer" | cut -d: -f2 | tr '\n' ' ')" = "unlocking 2 got " ] ||
        fail "rlock got the lock before the peer's last unlock: $(cat "$dir/peer")"
    grep -qx "unlocked 0" "$dir/peer" && grep -qx "unlocked 1" "$dir/peer" ||
        fail "the peer's unlocks: $(cat "$dir/peer")"

    # rlock's release wakes a Redisson waiter at once: without the message
    # it would sleep the PTTL it was told (rlock's lease, 30 s).
    "$RLOCK" run --layout redisson waited -- sleep 1 &
    peer=$!
    for _ in $(seq 250); do [ "$(rcli exists waited)" = 1 ] && break; sleep 0.02; done
    [ "$(rcli exists waited)" = 1 ] || fail "rlock did not take 'waited'"
    out=$("$PYTHON" "$here/redisson_peer.py" "$dir/redis.sock" wait waited)
    wait "$peer" || fail "rlock run failed"
    echo "redisson peer waited: ${out% *} s, woken by ${out#* } message(s)"
    awk -v w="${out% *}" 'BEGIN { exit !(w < 10) }' ||
        fail "the peer waited ${out% *} s: not woken by rlock's release"
    [ "${out#* }" -ge 1 ] || fail "the peer got no message"
}

"case_$1"
