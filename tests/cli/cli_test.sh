#!/usr/bin/env bash
# Tests of rlock(1), driving the built binary as a user would.
#   cli_test.sh CASE      (RLOCK_BIN names the binary)
# Each case starts its own redis-server on a unix socket in a temporary
# directory; it dies with this script (setpriv --pdeathsig) and is stopped
# by the EXIT trap.
set -u
RLOCK=${RLOCK_BIN:?set RLOCK_BIN}
unset RLOCK_URL REDIS_URL RLOCK_WATCHDOG_LEASE
dir=$(mktemp -d /tmp/rlock-cli-XXXXXX)
redis_pid=

# RLOCK_VALGRIND=1 (the cli_valgrind_* tests): every rlock the case runs goes
# through valgrind's memcheck. An error, or memory definitely lost, makes
# that rlock exit 99 and leaves a report in $dir/valgrind.PID.log; a report
# fails the case even where the case ignores rlock's status (a pipe, a
# background job). Under valgrind rlock is slower: slow scales the bounds
# on waiting, never what a check expects.
slow=1
if [ "${RLOCK_VALGRIND:-0}" = 1 ]; then
    slow=4
    cat > "$dir/rlock-valgrind" <<EOF
#!/bin/sh
exec valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \\
    --errors-for-leak-kinds=definite --track-fds=no -q \\
    --log-file='$dir/valgrind.%p.log' '$RLOCK' "\$@"
EOF
    chmod +x "$dir/rlock-valgrind"
    RLOCK=$dir/rlock-valgrind
fi
valgrind_reports() { find "$dir" -maxdepth 1 -name 'valgrind.*.log' -size +0; }

cleanup() {
    [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
    local f
    for f in $(valgrind_reports); do
        echo "== valgrind: $f" >&2
        cat "$f" >&2
    done
    rm -rf "$dir"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
expect_code() { # expect_code WANT GOT WHAT
    [ "$2" = "$1" ] || fail "$3: exit status $2, want $1"
}
ms() { echo $(( $(date +%s%N) / 1000000 )); }

start_redis() { # start_redis [extra redis-server args]
    setpriv --pdeathsig KILL redis-server --port 0 \
        --unixsocket "$dir/redis.sock" --unixsocketperm 700 --dir "$dir" \
        --save "" --appendonly no "$@" >"$dir/redis.log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 200); do
        [ -S "$dir/redis.sock" ] && redis-cli -s "$dir/redis.sock" ${AUTH:+-a "$AUTH" --no-auth-warning} ping >/dev/null 2>&1 && break
        sleep 0.05
    done
    [ -S "$dir/redis.sock" ] || fail "redis-server did not start"
    export RLOCK_URL="unix://$dir/redis.sock"
}
rcli() { redis-cli -s "$dir/redis.sock" "$@"; }

# Waits (bounded) until a command succeeds.
wait_for() { # wait_for SECONDS CMD...
    local until=$(( $(ms) + $1 * slow * 1000 )); shift
    until "$@"; do [ "$(ms)" -lt "$until" ] || return 1; sleep 0.02; done
}
is_held() { "$RLOCK" status "$1" | grep -q "held by"; }
waiting() { "$RLOCK" status "$1" | grep -q "$2 waiting"; }

case_counter_is_exact() {
    start_redis
    local workers=8 runs=12
    [ "$slow" = 1 ] || workers=3 runs=4
    echo 0 > "$dir/f"
    for w in $(seq $workers); do
        (for i in $(seq $runs); do
            "$RLOCK" run counter -- sh -c "read n < '$dir/f'; sleep 0.01; echo \$((n+1)) > '$dir/f'" || exit 1
         done) &
    done
    local failed=0
    for job in $(jobs -p); do
        [ "$job" = "$redis_pid" ] && continue
        wait "$job" || failed=1
    done
    [ $failed = 0 ] || fail "a run failed"
    [ "$(cat "$dir/f")" = $((workers * runs)) ] ||
        fail "counter is $(cat "$dir/f"), want $((workers * runs))"
}

case_conflict_codes_and_wait() {
    start_redis
    "$RLOCK" run busy -- sleep $((5 * slow)) &
    local holder=$!
    wait_for 5 is_held busy || fail "holder did not get the lock"
    "$RLOCK" run -n busy -- true 2>/dev/null; expect_code 1 $? "-n on a held lock"
    "$RLOCK" run -n -E 75 busy -- true 2>/dev/null; expect_code 75 $? "-E 75"
    "$RLOCK" run --nonblock --conflict-exit-code 3 busy -- true 2>/dev/null
    expect_code 3 $? "long options"
    local t0; t0=$(ms)
    "$RLOCK" run -w 200ms busy -- true 2>"$dir/err"; expect_code 1 $? "-w 200ms"
    local took=$(( $(ms) - t0 ))
    [ $took -ge 190 ] || fail "-w 200ms gave up after $took ms"
    [ $took -lt $((3000 * slow)) ] || fail "-w 200ms took $took ms"
    grep -q "not obtained within 200ms" "$dir/err" || fail "no message: $(cat "$dir/err")"
    waiting busy 0 || fail "a timed-out waiter left a trace: $("$RLOCK" status busy)"
    kill "$holder"; wait "$holder"
}

case_exit_status_passes_through() {
    start_redis
    "$RLOCK" run x -- sh -c 'exit 3'; expect_code 3 $? "exit 3"
    "$RLOCK" run x -- sh -c 'kill -9 $$'; expect_code 137 $? "killed by SIGKILL"
    "$RLOCK" run x -- sh -c 'kill -TERM $$'; expect_code 143 $? "killed by SIGTERM"
    "$RLOCK" run x -- /nonexistent/cmd 2>/dev/null; expect_code 127 $? "not found"
    "$RLOCK" run x -- "$dir" 2>/dev/null; expect_code 126 $? "not executable"
    "$RLOCK" status x | grep -q "x: free" || fail "lock left held"
}

case_sigterm_reaches_command_and_lock_is_freed() {
    start_redis
    set -m # background jobs of a script ignore SIGINT unless job control is on
    local s code pid
    for s in TERM INT HUP; do
        code=$((40 + ${#s}))
        rm -f "$dir/got"
        "$RLOCK" run sig -- sh -c "sleep 30 & p=\$!; trap 'kill \$p; echo $s > \"$dir/got\"; exit $code' $s; wait" &
        pid=$!
        wait_for 5 is_held sig || fail "no hold"
        sleep 0.2
        kill -$s $pid
        wait $pid; expect_code $code $? "command's status after SIG$s"
        [ "$(cat "$dir/got" 2>/dev/null)" = $s ] || fail "SIG$s did not reach the command"
        "$RLOCK" status sig | grep -q "sig: free" || fail "lock still held after SIG$s"
    done
}

case_interrupted_while_waiting_leaves_no_trace() {
    start_redis
    "$RLOCK" run q -- sleep 5 &
    local holder=$!
    wait_for 5 is_held q || fail "no hold"
    "$RLOCK" run q -- touch "$dir/ran" 2>/dev/null &
    local waiter=$!
    wait_for 5 waiting q 1 || fail "waiter not queued"
    kill -TERM $waiter
    wait $waiter; expect_code 143 $? "interrupted waiter"
    waiting q 0 || fail "the interrupted waiter is still queued"
    [ ! -e "$dir/ran" ] || fail "command ran after the interrupt"
    kill $holder; wait $holder
    "$RLOCK" status q | grep -q "q: free" || fail "lock not free"
}

case_token_increases_run_after_run() {
    start_redis
    local a b c
    a=$("$RLOCK" run t -- sh -c 'echo $RLOCK_TOKEN')
    b=$("$RLOCK" run t -- sh -c 'echo $RLOCK_TOKEN')
    c=$("$RLOCK" run t -- sh -c 'echo $RLOCK_NAME:$RLOCK_TOKEN')
    [ "$a" -ge 1 ] && [ "$b" -gt "$a" ] || fail "tokens $a then $b"
    [ "$c" = "t:$((b + 1))" ] || fail "third run saw '$c'"
}

case_lost_lock_stops_the_command() {
    start_redis
    export RLOCK_WATCHDOG_LEASE=600ms
    "$RLOCK" run lost -- sleep 20 2>"$dir/err" &
    local pid=$! t0
    wait_for 5 is_held lost || fail "no hold"
    t0=$(ms)
    rcli DEL "{rlock:lost}" >/dev/null
    wait $pid; expect_code 79 $? "lost lock"
    # rlock waits for COMMAND to end, so COMMAND was stopped - by SIGTERM,
    # well before the 5 s grace period that ends in SIGKILL.
    [ $(( $(ms) - t0 )) -lt 4500 ] || fail "command not stopped by SIGTERM"
    grep -q "lost while the command ran" "$dir/err" || fail "no message: $(cat "$dir/err")"
    # --on-lost ignore: a warning, and the command's own status.
    "$RLOCK" run --on-lost ignore lost -- sh -c 'sleep 1.5; exit 5' 2>"$dir/err" &
    pid=$!
    wait_for 5 is_held lost || fail "no hold"
    rcli DEL "{rlock:lost}" >/dev/null
    wait $pid; expect_code 5 $? "--on-lost ignore"
    grep -q "lost while the command ran" "$dir/err" || fail "no warning"
    # A fixed lease shorter than the command.
    "$RLOCK" run --lease 300ms lost -- sleep 10 2>/dev/null; expect_code 79 $? "--lease 300ms"
}

case_status_json_unlock_and_ping() {
    start_redis
    "$RLOCK" status s1 | grep -qx "s1: free, last token 0, 0 waiting" || fail "status of a fresh name: $("$RLOCK" status s1)"
    "$RLOCK" run s1 -- sleep $((5 * slow)) &
    local pid=$!
    wait_for 5 is_held s1 || fail "no hold"
    # The first token of a name is the server's clock in microseconds.
    local tok
    tok=$(rcli GET '{rlock:s1}:fence')
    [[ $tok =~ ^[0-9]{16}$ ]] || fail "first token: $tok"
    "$RLOCK" status s1 | grep -Eq "^s1: held by [0-9a-f]{32}:[0-9]+, count 1, lease [0-9.]+s left, token $tok, 0 waiting$" ||
        fail "status: $("$RLOCK" status s1)"
    "$RLOCK" status --json s1 's"2' > "$dir/json"
    grep -Eq '^\{"name":"s1","held":true,"holder":"[0-9a-f]{32}:[0-9]+","count":1,"lease_ms":[0-9]+,"token":'"$tok"',"last_token":'"$tok"',"waiters":0\}$' "$dir/json" ||
        fail "json: $(cat "$dir/json")"
    grep -q '^{"name":"s\\"2","held":false,"holder":null,"count":0,"lease_ms":-1,"token":0,"last_token":0,"waiters":0}$' "$dir/json" ||
        fail "json of a free lock: $(cat "$dir/json")"
    "$RLOCK" unlock --force s1 > "$dir/out"; expect_code 0 $? "unlock --force"
    grep -Eq "^s1: removed the hold of [0-9a-f]{32}:[0-9]+ \(count 1, token $tok\)" "$dir/out" || fail "unlock said: $(cat "$dir/out")"
    "$RLOCK" status s1 | grep -qx "s1: free, last token $tok, 0 waiting" || fail "still held after unlock --force"
    "$RLOCK" unlock --force s1 > "$dir/out"; expect_code 1 $? "unlock --force of a free lock"
    grep -q "was not held" "$dir/out" || fail "unlock said: $(cat "$dir/out")"
    wait $pid; expect_code 79 $? "holder whose lock was removed"
    "$RLOCK" ping > "$dir/out"; expect_code 0 $? "ping"
    grep -Eq "^PONG from unix://.*: redis [0-9]+\.[0-9]+\.[0-9]+, round trip [0-9.]+ ms$" "$dir/out" || fail "ping said: $(cat "$dir/out")"
}

case_errors_have_documented_codes() {
    AUTH=s3cret start_redis --requirepass s3cret
    local sock="$dir/redis.sock" port
    "$RLOCK" --redis "unix://$sock" ping 2>"$dir/err"; expect_code 77 $? "no password"
    "$RLOCK" --redis "unix://:wrong@$sock" ping 2>"$dir/err"; expect_code 77 $? "wrong password"
    grep -q "unix://:\*\*\*@$sock" "$dir/err" || fail "URL not named, or password shown: $(cat "$dir/err")"
    grep -q wrong "$dir/err" && fail "password printed: $(cat "$dir/err")"
    "$RLOCK" --redis "unix://:s3cret@$sock" ping >/dev/null; expect_code 0 $? "right password"
    port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])' 2>/dev/null || echo 1)
    "$RLOCK" --redis "redis://u:topsecret@127.0.0.1:$port" ping 2>"$dir/err"; expect_code 69 $? "unreachable"
    [ "$(wc -l < "$dir/err")" = 1 ] || fail "more than one line: $(cat "$dir/err")"
    grep -q "redis://u:\*\*\*@127.0.0.1:$port" "$dir/err" || fail "URL not named: $(cat "$dir/err")"
    grep -q topsecret "$dir/err" && fail "password printed"
    RLOCK_URL="redis://127.0.0.1:$port" "$RLOCK" run x -- true 2>/dev/null; expect_code 69 $? "run, unreachable"
    "$RLOCK" --redis "http://nope" ping 2>/dev/null; expect_code 64 $? "bad URL"
    "$RLOCK" --redis "unix://:s3cret@$sock" run -w 5x x -- true 2>/dev/null; expect_code 64 $? "bad duration"
    "$RLOCK" --redis "unix://:s3cret@$sock" run -w -1 x -- true 2>/dev/null; expect_code 64 $? "negative duration"
    "$RLOCK" --redis "unix://:s3cret@$sock" run -n -w 1s x -- true 2>/dev/null; expect_code 64 $? "-n with -w"
    "$RLOCK" run x true 2>/dev/null; expect_code 64 $? "missing --"
    "$RLOCK" run 2>/dev/null; expect_code 64 $? "nothing to run"
    "$RLOCK" frobnicate 2>/dev/null; expect_code 64 $? "unknown command"
    "$RLOCK" --bogus ping 2>/dev/null; expect_code 64 $? "unknown option"
    "$RLOCK" status 2>/dev/null; expect_code 64 $? "status without names"
    "$RLOCK" unlock x 2>/dev/null; expect_code 64 $? "unlock without --force"
    RLOCK_WATCHDOG_LEASE=soon "$RLOCK" ping 2>/dev/null; expect_code 64 $? "bad RLOCK_WATCHDOG_LEASE"
    rcli -a s3cret --no-auth-warning SET "{rlock:typed}" x >/dev/null
    "$RLOCK" --redis "unix://:s3cret@$sock" run typed -- true 2>"$dir/err"; expect_code 76 $? "WRONGTYPE"
    grep -q WRONGTYPE "$dir/err" || fail "no WRONGTYPE text: $(cat "$dir/err")"
}

# A stopped (hung) server is "unavailable", never a lock conflict: the
# command timeout (2 s by default) is not a wait that ran out.
case_hung_server_is_unavailable() {
    start_redis
    "$RLOCK" run warm -- true; expect_code 0 $? "before"
    kill -STOP "$redis_pid"
    local t0 t
    t0=$(ms)
    "$RLOCK" run -n x -- true 2>"$dir/err"; expect_code 69 $? "run -n on a hung server"
    grep -q "no reply" "$dir/err" || fail "no detail: $(cat "$dir/err")"
    "$RLOCK" run -w 60s x -- true 2>/dev/null; expect_code 69 $? "run -w 60s on a hung server"
    "$RLOCK" status x 2>/dev/null; expect_code 69 $? "status on a hung server"
    "$RLOCK" ping 2>/dev/null; expect_code 69 $? "ping on a hung server"
    t=$(( $(ms) - t0 ))
    [ "$t" -lt 30000 ] || fail "four calls took $t ms"
    kill -CONT "$redis_pid"
    "$RLOCK" run -n x -- true; expect_code 0 $? "after SIGCONT"
}

# rlock-check, the checker as a program: a correct lock passes, no lock at
# all is caught, and bad arguments are usage errors.
case_checker_program_passes_and_fails() {
    start_redis
    local check=${RLOCK_CHECK_BIN:?set RLOCK_CHECK_BIN}
    "$check" --redis "$RLOCK_URL" -n 4 -m 50 > "$dir/out"; expect_code 0 $? "rlock-check"
    grep -Eq '^checker: holds 200 \(clean 200, .* -> OK$' "$dir/out" || fail "summary: $(cat "$dir/out")"
    [ "$(wc -l < "$dir/out")" = 1 ] || fail "more than one line: $(cat "$dir/out")"
    "$check" --redis "$RLOCK_URL" -n 4 -m 50 --hold-us 500 --unsafe > "$dir/out" 2>/dev/null
    expect_code 1 $? "rlock-check --unsafe"
    grep -q -- '-> VIOLATION$' "$dir/out" || fail "summary: $(cat "$dir/out")"
    "$check" --redis "$RLOCK_URL" -n 0 2>/dev/null; expect_code 64 $? "-n 0"
    env -u RLOCK_URL "$check" -n 2 2>/dev/null; expect_code 64 $? "no URL"
}

case_help_and_version() {
    "$RLOCK" --version | grep -Eq "^rlock [0-9]+\.[0-9]+\.[0-9]+" || fail "--version"
    "$RLOCK" --help | grep -q "usage: rlock" || fail "--help"
    for c in run status unlock ping demo; do
        "$RLOCK" $c --help | grep -q "usage: rlock .*$c" || fail "$c --help"
    done
    "$RLOCK" > /dev/null 2>&1; expect_code 64 $? "no command"
}

case_demo_passes_its_verdict_and_cleans_up() {
    "$RLOCK" demo --workers 4 --seconds 3 > "$dir/out"; expect_code 0 $? "demo"
    grep -q "verdict: PASS" "$dir/out" || fail "demo said: $(cat "$dir/out")"
    grep -q "overlapping holds: 0" "$dir/out" || fail "overlaps"
    grep -q "strictly increasing" "$dir/out" || fail "tokens"
    local server; server=$(grep -o "unix:///tmp/rlock-demo-[A-Za-z0-9]*" "$dir/out" | head -1)
    [ -n "$server" ] || fail "demo did not name its server"
    pgrep -f "${server#unix://}" >/dev/null && fail "redis-server left behind"
    [ ! -e "${server#unix://}" ] || fail "files left behind"
    # Against a given server.
    start_redis
    "$RLOCK" --redis "$RLOCK_URL" demo --workers 2 --seconds 1 | grep -q "verdict: PASS" || fail "demo --redis"
}

declare -F "case_${1:-}" >/dev/null || fail "no case named '${1:-}'"
"case_$1"
[ -z "$(valgrind_reports)" ] || fail "valgrind reported errors"
echo "ok $1"
