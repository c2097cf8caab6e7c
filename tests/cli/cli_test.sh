#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Tests of rlock(1), driving the built binary as a user would.
#   cli_test.sh CASE      (RLOCK_BIN names the binary)
# Each case starts its own redis-server on a unix socket in a temporary
# directory; it dies with this script (setpriv --pdeathsig) and is stopped
# by the EXIT trap.
set -u
RLOCK=${RLOCK_BIN:?set RLOCK_BIN}
# The server every case starts: redis-server, or $RLOCK_TEST_SERVER
# (valkey-server in CI's matrix). redis-cli speaks to either.
SERVER=${RLOCK_TEST_SERVER:-redis-server}
unset RLOCK_URL REDIS_URL RLOCK_WATCHDOG_LEASE
dir=$(mktemp -d /tmp/rlock-cli-XXXXXX)
here=$(cd "$(dirname "$0")" && pwd)
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
    if [ -f "$dir/tcp-pids" ]; then
        kill -CONT $(cat "$dir/tcp-pids") 2>/dev/null
        kill $(cat "$dir/tcp-pids") 2>/dev/null
    fi
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
    setpriv --pdeathsig KILL "$SERVER" --port 0 \
        --unixsocket "$dir/redis.sock" --unixsocketperm 700 --dir "$dir" \
        --save "" --appendonly no "$@" >"$dir/redis.log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 200); do
        [ -S "$dir/redis.sock" ] && redis-cli -s "$dir/redis.sock" ${AUTH:+-a "$AUTH" --no-auth-warning} ping >/dev/null 2>&1 && break
        sleep 0.05
    done
    [ -S "$dir/redis.sock" ] || fail "$SERVER did not start"
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

# -v: the client's events on stderr as they happen, one line each, the
# name escaped as status escapes it; nothing of it without -v.
case_verbose_prints_the_events() {
    start_redis
    export RLOCK_WATCHDOG_LEASE=300ms
    "$RLOCK" run -v $'v\x01e' -- sleep 0.5 2>"$dir/err" || fail "run -v failed"
    grep -q '^rlock: acquired "v\\x01e" token=[0-9]* count=1 wait=.*attempts=1$' "$dir/err" ||
        fail "no acquired line: $(cat "$dir/err")"
    grep -q '^rlock: renewed "v\\x01e" lease=300ms$' "$dir/err" ||
        fail "no renewed line: $(cat "$dir/err")"
    grep -q '^rlock: released "v\\x01e" count=0 held=' "$dir/err" ||
        fail "no released line: $(cat "$dir/err")"
    # In the order they happened.
    [ "$(grep -o '^rlock: [a-z-]*' "$dir/err" | head -1)" = "rlock: acquired" ] &&
        [ "$(grep -o '^rlock: [a-z-]*' "$dir/err" | tail -1)" = "rlock: released" ] ||
        fail "order: $(cat "$dir/err")"
    # Waiting, then timed out.
    "$RLOCK" run held -- sleep 3 &
    local pid=$!
    wait_for 5 is_held held || fail "no hold"
    "$RLOCK" run -v -w 300ms held -- true 2>"$dir/err"; expect_code 1 $? "busy"
    grep -q '^rlock: waiting "held"' "$dir/err" || fail "no waiting: $(cat "$dir/err")"
    grep -q '^rlock: wait-timeout "held" waited=' "$dir/err" ||
        fail "no wait-timeout: $(cat "$dir/err")"
    kill $pid; wait $pid
    "$RLOCK" run v -- true 2>"$dir/err" || fail "run failed"
    [ ! -s "$dir/err" ] || fail "events without -v: $(cat "$dir/err")"
    "$RLOCK" status -v v >/dev/null 2>"$dir/err" || fail "status -v"
    "$RLOCK" ping -v >/dev/null 2>"$dir/err" || fail "ping -v"
    "$RLOCK" list -v >/dev/null 2>"$dir/err" || fail "list -v: $(cat "$dir/err")"
    "$RLOCK" top -v --once --interval 100ms >/dev/null 2>"$dir/err" ||
        fail "top -v: $(cat "$dir/err")"
    "$RLOCK" ping -x 2>/dev/null; expect_code 64 $? "ping -x"
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

# status and unlock --force act only on keys shaped like a lock of the
# chosen layout: a plain string, hash or list under each layout's lock key
# is refused with 65 (EX_DATAERR) and left as it was.
case_status_and_unlock_refuse_data_keys() {
    start_redis
    local layout key kind before after
    for layout in native token redisson; do
        for kind in string hash list; do
            key=data-$kind
            [ $layout = native ] && key="{rlock:data-$kind}"
            rcli DEL "$key" > /dev/null
            case $kind in
            string) rcli SET "$key" "precious data" > /dev/null ;;
            hash) rcli HSET "$key" name Ada > /dev/null ;;
            list) rcli RPUSH "$key" job-1 job-2 > /dev/null ;;
            esac
            before=$(rcli --no-raw DUMP "$key")
            "$RLOCK" status --layout $layout "data-$kind" > "$dir/out" 2> "$dir/err"
            expect_code 65 $? "status --layout $layout of a $kind"
            grep -q "is not a lock of the" "$dir/err" || fail "status said: $(cat "$dir/err")"
            [ ! -s "$dir/out" ] || fail "status printed: $(cat "$dir/out")"
            "$RLOCK" unlock --force --layout $layout "data-$kind" > "$dir/out" 2> "$dir/err"
            expect_code 65 $? "unlock --force --layout $layout of a $kind"
            grep -q "left untouched" "$dir/err" || fail "unlock said: $(cat "$dir/err")"
            after=$(rcli --no-raw DUMP "$key")
            [ "$before" = "$after" ] || fail "$key changed under --layout $layout"
        done
    done
    # A real lock of each layout is still seen and removed.
    for layout in native token redisson; do
        RLOCK_WATCHDOG_LEASE=3s "$RLOCK" run --layout $layout real-$layout -- sleep $((10 * slow)) &
        local pid=$!
        wait_for 5 eval '"$RLOCK" status --layout '$layout' real-'$layout' | grep -q "held by"' ||
            fail "no hold under --layout $layout"
        "$RLOCK" unlock --force --layout $layout real-$layout > "$dir/out"
        expect_code 0 $? "unlock --force of a real $layout lock"
        grep -q "pid $pid on" "$dir/out" || fail "unlock said: $(cat "$dir/out")"
        wait $pid
        expect_code 79 $? "holder whose $layout lock was removed"
    done
}

# An application's string without expiry under a name is not a lock of
# the token layout: status says "no expiry" (not a negative lease) and the
# forced release refuses it, unless the operator says --no-expiry.
case_a_string_without_expiry_is_no_token_lock_unless_said() {
    start_redis
    rcli SET app:config 'db_password=hunter2' > /dev/null
    "$RLOCK" status --layout token app:config > "$dir/out"; expect_code 0 $? "status"
    grep -q "count 1, no expiry" "$dir/out" || fail "status said: $(cat "$dir/out")"
    grep -q -- "-0.00" "$dir/out" && fail "a negative lease: $(cat "$dir/out")"
    "$RLOCK" status --json --layout token app:config | grep -q '"lease_ms":null,' ||
        fail "json: $("$RLOCK" status --json --layout token app:config)"
    "$RLOCK" unlock --force --layout token app:config > "$dir/out" 2> "$dir/err"
    expect_code 65 $? "unlock --force of a string without expiry"
    grep -q "no expiry" "$dir/err" || fail "unlock said: $(cat "$dir/err")"
    [ "$(rcli GET app:config)" = "db_password=hunter2" ] || fail "the string was touched"
    [ "$(rcli PTTL app:config)" = -1 ] || fail "an expiry was set"
    "$RLOCK" unlock --force --no-expiry --layout token app:config > "$dir/out"
    expect_code 0 $? "unlock --force --no-expiry"
    [ "$(rcli EXISTS app:config)" = 0 ] || fail "not removed with --no-expiry"
    # A token lock with an expiry needs no flag.
    rcli SET peer:lock 'f81d4fae7dec11d0a76500a0c91e6bf6' PX 60000 > /dev/null
    "$RLOCK" unlock --force --layout token peer:lock > /dev/null; expect_code 0 $? "a peer's lock"
    [ "$(rcli EXISTS peer:lock)" = 0 ] || fail "a peer's lock was not removed"
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
    # The holder names its process: rlock run's pid and this host's name
    # (as rlock writes it: at most 48 bytes of [A-Za-z0-9._-]).
    local host
    host=$(hostname | sed 's/[^A-Za-z0-9._-]/_/g' | cut -c1-48)
    "$RLOCK" status s1 | grep -Eq "^s1: held by [0-9a-f]{32}@$host/$pid:[0-9]+ \(pid $pid on $host\), count 1, lease [0-9.]+s left, token $tok, 0 waiting$" ||
        fail "status: $("$RLOCK" status s1)"
    "$RLOCK" status --json s1 's"2' > "$dir/json"
    grep -Eq '^\{"name":"s1","held":true,"holder":"[0-9a-f]{32}@'"$host/$pid"':[0-9]+","host":"'"$host"'","pid":'"$pid"',"count":1,"lease_ms":[0-9]+,"token":'"$tok"',"last_token":'"$tok"',"waiters":0\}$' "$dir/json" ||
        fail "json: $(cat "$dir/json")"
    grep -q '^{"name":"s\\"2","held":false,"holder":null,"host":null,"pid":null,"count":0,"lease_ms":-1,"token":0,"last_token":0,"waiters":0}$' "$dir/json" ||
        fail "json of a free lock: $(cat "$dir/json")"
    "$RLOCK" unlock --force s1 > "$dir/out"; expect_code 0 $? "unlock --force"
    grep -Eq "^s1: removed the hold of [0-9a-f]{32}@$host/$pid:[0-9]+ \(pid $pid on $host; count 1, token $tok\)" "$dir/out" || fail "unlock said: $(cat "$dir/out")"
    "$RLOCK" status s1 | grep -qx "s1: free, last token $tok, 0 waiting" || fail "still held after unlock --force"
    "$RLOCK" unlock --force s1 > "$dir/out"; expect_code 1 $? "unlock --force of a free lock"
    grep -q "was not held" "$dir/out" || fail "unlock said: $(cat "$dir/out")"
    wait $pid; expect_code 79 $? "holder whose lock was removed"
    "$RLOCK" ping > "$dir/out"; expect_code 0 $? "ping"
    local name=redis
    case $SERVER in *valkey*) name=valkey ;; esac # the server names itself
    grep -Eq "^PONG from unix://.*: $name [0-9]+\.[0-9]+\.[0-9]+, round trip [0-9.]+ ms$" "$dir/out" || fail "ping said: $(cat "$dir/out")"
}

# A secret written where rlock does not take one is never said back: a
# password alone before the '@' (Lettuce's form), or a query parameter
# rlock does not know (password=, in a redlock:// URL).
case_misplaced_secrets_are_never_said_back() {
    local u
    for u in 'redis://S3CRET@127.0.0.1:1' \
             'redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?password=S3CRET' \
             'redis://127.0.0.1:1?auth=S3CRET&db=1'; do
        "$RLOCK" --redis "$u" ping 2>"$dir/err"; expect_code 64 $? "$u"
        ! grep -q S3CRET "$dir/err" || fail "a secret was said back: $(cat "$dir/err")"
        grep -q '\*\*\*' "$dir/err" || fail "nothing masked: $(cat "$dir/err")"
        RLOCK_URL=$u "$RLOCK" ping 2>"$dir/err"; expect_code 64 $? "RLOCK_URL=$u"
        ! grep -q S3CRET "$dir/err" || fail "a secret was said back: $(cat "$dir/err")"
    done
    "$RLOCK" --redis 'redis://127.0.0.1:1/3?db=4' ping 2>"$dir/err"
    expect_code 64 $? "the database given twice"
    grep -q "twice" "$dir/err" || fail "said: $(cat "$dir/err")"
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
    "$RLOCK" unlock --force x 2>"$dir/err"; expect_code 69 $? "unlock on a hung server"
    grep -q "(null)" "$dir/err" && fail "unlock said (null): $(cat "$dir/err")"
    "$RLOCK" run -q -w 1s x -- true 2>"$dir/err"; expect_code 69 $? "run -q -w 1s on a hung server"
    [ -s "$dir/err" ] || fail "-q hid that the server did not answer"
    t=$(( $(ms) - t0 ))
    [ "$t" -lt 45000 ] || fail "six calls took $t ms"
    kill -CONT "$redis_pid"
    "$RLOCK" run -n x -- true; expect_code 0 $? "after SIGCONT"
}

# rlock-check, the checker as a program: a correct lock passes, no lock at
# all is caught, and bad arguments are usage errors.
# An ACL user without PUBLISH: a release that Redis carries out but whose
# notification is refused is said on stderr, and is a success: run keeps
# COMMAND's status, unlock --force exits 0; the waiter gets the lock by
# its own timer.
case_unnotified_release_is_said_and_succeeds() {
    start_redis
    rcli ACL SETUSER nopub on '>pw' '~*' '&*' +@all -publish -spublish >/dev/null
    printf 'pw\n' > "$dir/pw"
    local as_nopub=("$RLOCK" --user nopub --password-file "$dir/pw")
    "${as_nopub[@]}" run -n held -- sh -c "sleep 1" 2>"$dir/run.err" &
    local holder=$!
    wait_for 5 is_held held || fail "the holder never held"
    "$RLOCK" run -w 20s held -- true 2>"$dir/wait.err" &
    local waiter=$!
    wait_for 5 waiting held 1 || fail "the waiter never queued"
    wait "$holder"; expect_code 0 $? "run whose release was not notified"
    grep -q "not notified" "$dir/run.err" || fail "run said nothing: $(cat "$dir/run.err")"
    wait "$waiter"; expect_code 0 $? "the waiter, woken by its timer"
    # An operator's release: the same.
    "$RLOCK" run -n held -- sleep 3 &
    holder=$!
    wait_for 5 is_held held || fail "no second holder"
    "$RLOCK" run -w 20s held -- true 2>/dev/null &
    waiter=$!
    wait_for 5 waiting held 1 || fail "no second waiter"
    "${as_nopub[@]}" unlock --force held >"$dir/out" 2>"$dir/err"
    expect_code 0 $? "unlock --force whose notification was refused"
    grep -q "removed the hold" "$dir/out" || fail "unlock said: $(cat "$dir/out")"
    grep -q "not notified" "$dir/err" || fail "unlock --force said nothing: $(cat "$dir/err")"
    wait "$waiter"; expect_code 0 $? "the second waiter"
    wait "$holder"
}

case_checker_program_passes_and_fails() {
    start_redis
    local check=${RLOCK_CHECK_BIN:?set RLOCK_CHECK_BIN}
    "$check" --redis "$RLOCK_URL" -n 4 -m 50 > "$dir/out"; expect_code 0 $? "rlock-check"
    grep -Eq '^checker: holds 200 \(clean 200, .* -> OK$' "$dir/out" || fail "summary: $(cat "$dir/out")"
    [ "$(wc -l < "$dir/out")" = 1 ] || fail "more than one line: $(cat "$dir/out")"
    "$check" --redis "$RLOCK_URL" -n 4 -m 50 --hold-us 500 --unsafe > "$dir/out" 2>/dev/null
    expect_code 1 $? "rlock-check --unsafe"
    grep -q -- '-> VIOLATION$' "$dir/out" || fail "summary: $(cat "$dir/out")"
    "$check" --redis "$RLOCK_URL" -n 3 -m 20 --layout token > "$dir/out"
    expect_code 0 $? "rlock-check --layout token"
    grep -Eq '^checker: holds 60 \(clean 60, .* -> OK$' "$dir/out" || fail "summary: $(cat "$dir/out")"
    "$check" --redis "$RLOCK_URL" -n 3 -m 20 --layout redisson > "$dir/out"
    expect_code 0 $? "rlock-check --layout redisson"
    grep -Eq '^checker: holds 60 \(clean 60, .* -> OK$' "$dir/out" || fail "summary: $(cat "$dir/out")"
    "$check" --redis "$RLOCK_URL" --layout Redisson 2>/dev/null; expect_code 64 $? "--layout Redisson"
    "$check" --redis "$RLOCK_URL" -n 0 2>/dev/null; expect_code 64 $? "-n 0"
    env -u RLOCK_URL "$check" -n 2 2>/dev/null; expect_code 64 $? "no URL"
}

case_help_and_version() {
    "$RLOCK" --version | grep -Eq "^rlock [0-9]+\.[0-9]+\.[0-9]+" || fail "--version"
    "$RLOCK" --help | grep -q "usage: rlock" || fail "--help"
    for c in run status unlock list top ping demo; do
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

# Fault scenario 8: every option of every subcommand with bad values. Each
# row is "WANT|STDERR-PATTERN|ARG|ARG...": rlock must exit WANT, print one
# line on stderr matching the extended regular expression, print nothing on
# stdout, and reach Redis not at all - no connection, no command - even
# where the URL would reach the test's server. Tokens in ARGs: {empty} is
# "", {long} a name of RLOCK_NAME_MAX + 1 bytes, {sock} the server's
# socket, {ran} a file that COMMAND would create; ENV:NAME=VALUE and
# ENV:-NAME set and unset a variable for that row.
# A redis-server on a free loopback TCP port (Redlock nodes are host:port);
# sets tcp_port. Not in a subshell: the server dies with its parent
# (pdeathsig). Stopped with the others at exit.
start_tcp_redis() { # start_tcp_redis [extra redis-server args]
    local p try
    for try in $(seq 30); do
        p=$(( 20000 + RANDOM % 30000 ))
        setpriv --pdeathsig KILL "$SERVER" --port "$p" --bind 127.0.0.1 \
            --dir "$dir" --save "" --appendonly no \
            --dbfilename "dump-$p.rdb" --cluster-config-file "nodes-$p.conf" \
            "$@" >"$dir/redis-$p.log" 2>&1 &
        local pid=$!
        for _ in $(seq 100); do
            redis-cli -p "$p" ping >/dev/null 2>&1 && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.05
        done
        if redis-cli -p "$p" ping >/dev/null 2>&1; then
            echo "$pid" >> "$dir/tcp-pids"
            tcp_port=$p
            return 0
        fi
        kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    done
    fail "no free port for redis-server"
}

# counter_runs WORKERS RUNS: processes each doing RUNS non-atomic
# increments of a file under `rlock run counter` ($RLOCK_URL); the count
# must come out exact.
counter_runs() {
    local workers="" failed=0 job w i
    echo 0 > "$dir/f"
    for w in $(seq "$1"); do
        (for i in $(seq "$2"); do
            "$RLOCK" run counter -- sh -c "read n < '$dir/f'; sleep 0.01; echo \$((n+1)) > '$dir/f'" || exit 1
         done) &
        workers="$workers $!"
    done
    for job in $workers; do wait "$job" || failed=1; done
    [ $failed = 0 ] || fail "a run failed"
    [ "$(cat "$dir/f")" = $(( $1 * $2 )) ] ||
        fail "counter is $(cat "$dir/f"), want $(( $1 * $2 ))"
}

case_redlock_run_and_status() {
    local p1 p2 p3
    start_tcp_redis; p1=$tcp_port
    start_tcp_redis; p2=$tcp_port
    start_tcp_redis; p3=$tcp_port
    export RLOCK_URL="redlock://127.0.0.1:$p1,127.0.0.1:$p2,127.0.0.1:$p3"
    counter_runs 3 4
    "$RLOCK" status counter | grep -q "counter: free" || fail "lock left held"
    "$RLOCK" run held -- sleep $((3 * slow)) &
    local holder=$!
    wait_for 5 is_held held || fail "holder did not get the lock"
    "$RLOCK" run -n held -- true 2>/dev/null; expect_code 1 $? "-n on a held lock"
    kill "$holder"; wait "$holder"
    # One node of three stopped: a majority remains.
    kill -STOP "$(sed -n 1p "$dir/tcp-pids")"
    "$RLOCK" run -n one-down -- true; expect_code 0 $? "one node stopped"
    kill -STOP "$(sed -n 2p "$dir/tcp-pids")"
    "$RLOCK" run -n two-down -- true 2>"$dir/err"; expect_code 69 $? "two nodes stopped"
    grep -q "majority" "$dir/err" || fail "no quorum message: $(cat "$dir/err")"
    kill -CONT $(cat "$dir/tcp-pids")
    # An even number of nodes works, with a warning.
    RLOCK_URL="redlock://127.0.0.1:$p1,127.0.0.1:$p2" "$RLOCK" run -n even -- true 2>"$dir/err"
    expect_code 0 $? "two nodes"
    grep -q "warning: 2 Redlock nodes need 2 for a majority" "$dir/err" ||
        fail "no warning for an even number of nodes: $(cat "$dir/err")"
    "$RLOCK" run -n odd -- true 2>"$dir/err"
    [ ! -s "$dir/err" ] || fail "a warning for three nodes: $(cat "$dir/err")"
}

case_sentinel_run_and_status() {
    start_tcp_redis; local mp=$tcp_port sp
    local try
    for try in 1 2 3 4 5; do # a free port, as for the servers
        sp=$(( 20000 + RANDOM % 30000 ))
        printf 'sentinel monitor mymaster 127.0.0.1 %s 1\n' "$mp" > "$dir/sentinel.conf"
        setpriv --pdeathsig KILL "$SERVER" "$dir/sentinel.conf" --sentinel \
            --port "$sp" --bind 127.0.0.1 --dir "$dir" >"$dir/sentinel.log" 2>&1 &
        echo $! >> "$dir/tcp-pids"
        wait_for 5 redis-cli -p "$sp" sentinel get-master-addr-by-name mymaster && break
    done
    redis-cli -p "$sp" ping >/dev/null 2>&1 || fail "sentinel did not start"
    export RLOCK_URL="redis-sentinel://127.0.0.1:$sp/mymaster"
    "$RLOCK" run s -- sh -c "redis-cli -p $mp exists '{rlock:s}' > '$dir/seen'"
    expect_code 0 $? "run through the sentinel"
    [ "$(cat "$dir/seen")" = 1 ] || fail "the lock was not on the master"
    "$RLOCK" status s | grep -q "s: free" || fail "status: $("$RLOCK" status s)"
    "$RLOCK" ping | grep -q PONG || fail "ping through the sentinel"
}

# Three masters made a cluster by redis-cli; sets cluster_ports
# (" 127.0.0.1:P ...") and RLOCK_URL (the last of them).
start_cluster() {
    local p
    cluster_ports=""
    for _ in 1 2 3; do
        start_tcp_redis --cluster-enabled yes
        cluster_ports="$cluster_ports 127.0.0.1:$tcp_port"
    done
    # shellcheck disable=SC2086
    redis-cli --cluster create $cluster_ports --cluster-yes >/dev/null 2>&1 ||
        fail "cluster create"
    p=${cluster_ports##* }
    wait_for 20 sh -c "redis-cli -p ${p##*:} cluster info | grep -q cluster_state:ok" ||
        fail "cluster not ok"
    export RLOCK_URL="redis-cluster://$p"
}

case_cluster_run_and_status() {
    start_cluster
    counter_runs 3 3
    "$RLOCK" status counter | grep -q "counter: free" || fail "status: $("$RLOCK" status counter)"
    "$RLOCK" ping | grep -q PONG || fail "ping on the cluster"
}

# A slot migrated by hand as redis-cli --cluster reshard does, in two
# steps: migration_start SLOT SRC DST (IMPORTING, MIGRATING, every key
# MIGRATEd; the slot still the source's) and migration_end SLOT DST (the
# slot the destination's on every node). SRC and DST are ports.
migration_start() {
    local k
    redis-cli -p "$3" cluster setslot "$1" importing "$(redis-cli -p "$2" cluster myid)" >/dev/null
    redis-cli -p "$2" cluster setslot "$1" migrating "$(redis-cli -p "$3" cluster myid)" >/dev/null
    for k in $(redis-cli -p "$2" cluster getkeysinslot "$1" 100); do
        redis-cli -p "$2" migrate 127.0.0.1 "$3" "$k" 0 5000 | grep -q OK ||
            fail "MIGRATE $k"
    done
}
migration_end() {
    local id hp
    id=$(redis-cli -p "$2" cluster myid)
    redis-cli -p "$2" cluster setslot "$1" node "$id" >/dev/null
    for hp in $cluster_ports; do
        [ "${hp##*:}" = "$2" ] ||
            redis-cli -p "${hp##*:}" cluster setslot "$1" node "$id" >/dev/null
    done
}

# Issue 33, item 7: during a migration the lock's requests (they name its
# queue keys, which a held lock without waiters does not have) meet ASK,
# then TRYAGAIN from the importing node until the slot is its own. rlock
# waits that out within its deadline and answers (exit 1 for a held lock,
# status as usual); a migration that outlasts the deadline is exit 69 with
# a message that says so, never a raw ASK or TRYAGAIN (exit 76).
case_cluster_migration_is_waited_out() {
    start_cluster
    "$RLOCK" run mig -- sleep 120 &
    local holder=$! slot src="" dst="" hp t0 took fin
    wait_for 5 is_held mig || fail "the holder did not get the lock"
    slot=$(redis-cli -p "${cluster_ports##*:}" cluster keyslot '{rlock:mig}')
    for hp in $cluster_ports; do
        if [ "$(redis-cli -p "${hp##*:}" cluster countkeysinslot "$slot")" -gt 0 ]; then
            src=${hp##*:}
        else
            dst=${hp##*:}
        fi
    done
    [ -n "$src" ] || fail "no node has slot $slot's keys"

    # Finished a second after the request: waited out, then busy.
    migration_start "$slot" "$src" "$dst"
    (sleep 1; migration_end "$slot" "$dst") &
    fin=$!
    t0=$(ms)
    "$RLOCK" run -n mig -- true 2>"$dir/err"
    expect_code 1 $? "run -n during a migration ($(cat "$dir/err"))"
    took=$(( $(ms) - t0 ))
    wait "$fin"
    [ "$took" -ge 900 ] || fail "run -n answered in $took ms, before the migration ended"
    [ "$took" -lt $((2000 * slow)) ] || fail "run -n took $took ms"

    # Back again, status meanwhile.
    migration_start "$slot" "$dst" "$src"
    (sleep 1; migration_end "$slot" "$src") &
    fin=$!
    "$RLOCK" status mig >"$dir/out" 2>"$dir/err"
    expect_code 0 $? "status during a migration ($(cat "$dir/err"))"
    wait "$fin"
    grep -q "mig: held by" "$dir/out" || fail "status: $(cat "$dir/out")"

    # A migration that does not end within the deadline (2 s).
    migration_start "$slot" "$src" "$dst"
    t0=$(ms)
    "$RLOCK" run -n mig -- true 2>"$dir/err"
    expect_code 69 $? "run -n during a migration that does not end"
    took=$(( $(ms) - t0 ))
    [ "$took" -lt $((3000 * slow)) ] || fail "run -n took $took ms"
    grep -q "slot $slot of cluster .* is migrating: .*TRYAGAIN" "$dir/err" ||
        fail "run -n said: $(cat "$dir/err")"
    "$RLOCK" status mig 2>"$dir/err"
    expect_code 69 $? "status during a migration that does not end"
    grep -q "is migrating" "$dir/err" || fail "status said: $(cat "$dir/err")"
    migration_end "$slot" "$dst"
    is_held mig || fail "the lock was not held after its migration"
    kill "$holder"; wait "$holder"
    "$RLOCK" status mig | grep -q "mig: free" || fail "status: $("$RLOCK" status mig)"
}

case_bad_arguments_table() {
    start_redis
    local sock="$dir/redis.sock" long row want pat code failed=0 n=0 x
    long=$(printf 'n%.0s' $(seq 1025))
    # A lock held with a fixed lease (nothing renews it while the table
    # runs) and a key of someone else's: no row may touch either.
    "$RLOCK" run --lease 10m held -- sleep 300 &
    table_holder=$! # global: the EXIT trap runs after this function
    trap 'kill "$table_holder" 2>/dev/null; cleanup' EXIT
    wait_for 5 is_held held || fail "the holder did not get its lock"
    rcli SET bystander 1 >/dev/null
    local T="touch|{ran}" # the COMMAND of run rows
    local rows=(
        # Global options and the subcommand.
        "64|--redis needs a value|--redis"
        "64|--redis needs a value|--redis|{empty}|ping"
        "64|--redis needs a value|--redis={empty}|ping"
        "64|--password-file needs a value|--password-file"
        "64|--password-file /nonexistent/pw: No such file|--password-file|/nonexistent/pw|ping"
        "64|--password-file /dev/null: no password on its first line|--password-file=/dev/null|ping"
        "64|--user needs a password|--user|alice|ping"
        "64|must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://|--redis|http://127.0.0.1|ping"
        "64|must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://|--redis=http://127.0.0.1|ping"
        "64|must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://|--redis|{sock}|ping"
        "64|rediss:// is TLS|--redis|rediss://127.0.0.1?tls=0|ping"
        "64|missing host|--redis|redis://|ping"
        "64|port must be a number|--redis|redis://127.0.0.1:0|ping"
        "64|port must be a number|--redis|redis://127.0.0.1:65536|ping"
        "64|database must be a non-negative number|--redis|redis://127.0.0.1/x|ping"
        "64|unknown parameter|--redis|redis://127.0.0.1?timeout=1|ping"
        "64|a user name needs a password|--redis|redis://user@127.0.0.1|ping"
        "64|empty password|--redis|redis://u:@127.0.0.1|ping"
        "64|escape in the password|--redis|redis://u:p%zz@127.0.0.1|ping"
        "64|absolute socket path|--redis|unix://relative.sock|ping"
        "64|db must be a non-negative number|--redis|unix://{sock}?db=x|ping"
        "64|unknown parameter|--redis|unix://{sock}?timeout=1|ping"
        "64|must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://|--redis|http://x|run|x|--|$T"
        "64|must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://|--redis|http://x|status|x"
        "64|must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://|--redis|http://x|unlock|--force|held"
        "64|must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://|--redis|http://x|demo|--workers|1|--seconds|1"
        "64|must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://|ENV:RLOCK_URL=http://x|ping"
        "64|db must be a non-negative number|ENV:RLOCK_URL=unix://{sock}?db=x|ping"
        "64|must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://|ENV:RLOCK_URL=http://x|run|x|--|$T"
        "64|must start with redis://, unix://, redis-sentinel://, redis-cluster:// or redlock://|ENV:-RLOCK_URL|ENV:REDIS_URL=http://x|ping"
        "64|port must be a number|ENV:-RLOCK_URL|ENV:REDIS_URL=redis://h:0|status|x"
        "64|RLOCK_WATCHDOG_LEASE: bad duration 'soon'|ENV:RLOCK_WATCHDOG_LEASE=soon|ping"
        "64|RLOCK_WATCHDOG_LEASE: bad duration '29ms'|ENV:RLOCK_WATCHDOG_LEASE=29ms|run|x|--|$T"
        "64|RLOCK_WATCHDOG_LEASE: bad duration '0'|ENV:RLOCK_WATCHDOG_LEASE=0|status|x"
        "64|RLOCK_WATCHDOG_LEASE: bad duration '-1s'|ENV:RLOCK_WATCHDOG_LEASE=-1s|unlock|--force|held"
        "64|unknown option --bogus|--bogus|ping"
        "64|unknown option -x|-x|ping"
        "64|unknown option --redi |--redi|unix://{sock}|ping"
        "64|unknown option -- |--|ping"
        "64|unknown option - |-|ping"
        "64|no command given|{nothing}"
        "64|no command given|--redis|unix://{sock}"
        "64|unknown command 'frobnicate'|frobnicate"
        "64|unknown command 'RUN'|RUN|x|--|$T"
        "64|unknown command ''|{empty}"
        "64|unknown command 'frobnicate'|frobnicate|--help"
        # run
        "64|usage: rlock run|run"
        "64|usage: rlock run|run|x"
        "64|usage: rlock run|run|x|--"
        "64|usage: rlock run|run|--|$T"
        "64|put -- before the command|run|x|$T"
        "64|put -- before the command|run|a|b|--|$T"
        "64|lock names are 1 to 1024 bytes|run|{empty}|--|$T"
        "64|lock names are 1 to 1024 bytes|run|{long}|--|$T"
        "64|-w needs a value|run|x|-w"
        "64|--wait needs a value|run|x|--wait"
        "64|bad duration '5x' for -w|run|-w|5x|x|--|$T"
        "64|bad duration '5x' for --wait|run|--wait|5x|x|--|$T"
        "64|bad duration '-1' for -w|run|-w|-1|x|--|$T"
        "64|bad duration '-0' for -w|run|-w|-0|x|--|$T"
        "64|bad duration '\+5' for -w|run|-w|+5|x|--|$T"
        "64|-w needs a value|run|-w|{empty}|x|--|$T"
        "64|--wait needs a value|run|--wait=|x|--|$T"
        "64|bad duration '5x' for --wait|run|--wait=5x|x|--|$T"
        "64|--nonblock takes no value|run|--nonblock=1|x|--|$T"
        "64|--quiet takes no value|run|--quiet=yes|x|--|$T"
        "64|--kill-after needs a value|run|x|--kill-after"
        "64|bad duration 'x' for --kill-after|run|--kill-after|x|x|--|$T"
        "64|bad duration '-1' for --kill-after|run|--kill-after=-1|x|--|$T"
        "64|bad duration ' 5' for -w|run|-w| 5|x|--|$T"
        "64|bad duration '5 s' for -w|run|-w|5 s|x|--|$T"
        "64|bad duration '5S' for -w|run|-w|5S|x|--|$T"
        "64|bad duration '5sec' for -w|run|-w|5sec|x|--|$T"
        "64|bad duration '1ms5' for -w|run|-w|1ms5|x|--|$T"
        "64|bad duration 'ms' for -w|run|-w|ms|x|--|$T"
        "64|bad duration '1.5.5' for -w|run|-w|1.5.5|x|--|$T"
        "64|bad duration 'nan' for -w|run|-w|nan|x|--|$T"
        "64|bad duration 'inf' for -w|run|-w|inf|x|--|$T"
        "64|bad duration '1e400' for -w|run|-w|1e400|x|--|$T"
        "64|bad duration '9000000001s' for -w|run|-w|9000000001s|x|--|$T"
        "64|bad duration '0x10' for -w|run|-w|0x10|x|--|$T"
        "64|bad duration '--' for -w|run|x|-w|--|$T"
        "64|-n and -w exclude each other|run|-n|-w|1s|x|--|$T"
        "64|-n and -w exclude each other|run|-w|1s|-n|x|--|$T"
        "64|-n and -w exclude each other|run|--nonblock|--wait|0|x|--|$T"
        "64|-l needs a value|run|x|-l"
        "64|--lease needs a value|run|x|--lease"
        "64|bad duration '0' for -l|run|-l|0|x|--|$T"
        "64|bad duration '0ms' for --lease|run|--lease|0ms|x|--|$T"
        "64|bad duration '0.0001' for -l|run|-l|0.0001|x|--|$T"
        "64|bad duration '-5s' for -l|run|-l|-5s|x|--|$T"
        "64|bad duration '5x' for -l|run|-l|5x|x|--|$T"
        "64|-l needs a value|run|-l|{empty}|x|--|$T"
        "64|bad duration '9000000001s' for -l|run|-l|9000000001s|x|--|$T"
        "64|-E needs a value|run|x|-E"
        "64|--conflict-exit-code needs a value|run|x|--conflict-exit-code"
        "64|-E takes a number from 0 to 255|run|-E|-1|x|--|$T"
        "64|-E takes a number from 0 to 255|run|-E|256|x|--|$T"
        "64|-E takes a number from 0 to 255|run|-E|x|x|--|$T"
        "64|-E needs a value|run|-E|{empty}|x|--|$T"
        "64|-E takes a number from 0 to 255|run|-E|1.5|x|--|$T"
        "64|-E takes a number from 0 to 255|run|-E|0x3|x|--|$T"
        "64|-E takes a number from 0 to 255|run|-E|99999999999999999999|x|--|$T"
        "64|--conflict-exit-code takes a number from 0 to 255|run|--conflict-exit-code|300|x|--|$T"
        "64|--on-lost needs a value|run|x|--on-lost"
        "64|--on-lost takes kill or ignore|run|--on-lost|stop|x|--|$T"
        "64|--on-lost takes kill or ignore|run|--on-lost|KILL|x|--|$T"
        "64|--layout needs a value|run|x|--layout"
        "64|--layout takes native, redisson or token|run|--layout|redlock|x|--|$T"
        "64|--layout takes native, redisson or token|run|--layout|Token|x|--|$T"
        "64|--layout takes native, redisson or token|status|--layout|x"
        "64|--layout needs a value|status|x|--layout"
        "64|--layout takes native, redisson or token|status|--layout=x|held"
        "64|--layout takes native, redisson or token|unlock|--force|--layout|Redisson|held"
        "64|--layout needs a value|unlock|--force|--layout"
        "64|--on-lost needs a value|run|--on-lost|{empty}|x|--|$T"
        "64|unknown option -x|run|-x|x|--|$T"
        "64|unknown option --bogus|run|--bogus|x|--|$T"
        "64|unknown option --wai=5s|run|--wai=5s|x|--|$T"
        "64|unknown option -nw|run|-nw|1s|x|--|$T"
        # status
        "64|name at least one lock|status"
        "64|name at least one lock|status|--json"
        "64|name at least one lock|status|--"
        "64|name at least one lock|status|--json|--"
        "64|bad lock name ''|status|{empty}"
        "64|bad lock name ''|status|held|{empty}"
        "64|bad lock name 'n+'|status|{long}"
        "64|bad lock name 'n+'|status|--json|{long}"
        "64|unknown option --bogus|status|--bogus|held"
        "64|unknown option -j|status|-j|held"
        # unlock
        "64|usage: rlock unlock --force \[--no-expiry\] \[--layout L\] NAME|unlock"
        "64|usage: rlock unlock --force \[--no-expiry\] \[--layout L\] NAME|unlock|held"
        "64|usage: rlock unlock --force \[--no-expiry\] \[--layout L\] NAME|unlock|--force"
        "64|usage: rlock unlock --force \[--no-expiry\] \[--layout L\] NAME|unlock|held|--force"
        "64|usage: rlock unlock --force \[--no-expiry\] \[--layout L\] NAME|unlock|--forc|held"
        "64|usage: rlock unlock --force \[--no-expiry\] \[--layout L\] NAME|unlock|-f|held"
        "64|usage: rlock unlock --force \[--no-expiry\] \[--layout L\] NAME|unlock|--force|held|held"
        "64|bad lock name ''|unlock|--force|{empty}"
        "64|bad lock name 'n+'|unlock|--force|{long}"
        # ping
        "64|usage: rlock \[--redis URL\] ping|ping|extra"
        "64|usage: rlock \[--redis URL\] ping|ping|--json"
        # demo
        "64|--workers needs a value|demo|--workers"
        "64|--seconds needs a value|demo|--seconds"
        "64|--workers takes 1 to 64|demo|--workers=65"
        "64|bad duration '0' for --seconds|demo|--seconds=0"
        "64|usage: rlock demo|demo|--bogus"
        "64|usage: rlock demo|demo|extra"
        "64|--workers takes 1 to 64|demo|--workers|0"
        "64|--workers takes 1 to 64|demo|--workers|65"
        "64|--workers takes 1 to 64|demo|--workers|-1"
        "64|--workers takes 1 to 64|demo|--workers|x"
        "64|--workers needs a value|demo|--workers|{empty}"
        "64|--workers takes 1 to 64|demo|--workers|1.5"
        "64|bad duration '0' for --seconds|demo|--seconds|0"
        "64|bad duration '-1' for --seconds|demo|--seconds|-1"
        "64|bad duration '5x' for --seconds|demo|--seconds|5x"
        "64|--seconds needs a value|demo|--seconds|{empty}"
        "64|bad duration '3601' for --seconds|demo|--seconds|3601"
        "64|bad duration '2h' for --seconds|demo|--seconds|2h"
        # list
        "64|unknown option --bogus|list|--bogus"
        "64|unknown option --json=1|list|--json=1"
        "64|--layout needs a value|list|--layout"
        "64|--layout takes native, redisson or token|list|--layout|Native"
        "64|--max-locks takes a number from 1 to 10000000|list|--max-locks|0"
        "64|--max-locks needs a value|list|--max-locks={empty}"
        "64|--max-keys takes a number from 1000 to 1000000000000|list|--max-keys|999"
        "64|--max-keys takes a number from 1000 to 1000000000000|list|--max-keys=1e6"
        "64|bad pattern '\[a'|list|[a"
        "64|bad pattern 'a..' [(]empty|list|a\\"
        "64|bad pattern ''|list|{empty}"
        "64|usage: rlock list|list|a|b"
        # top
        "64|unknown option --bogus|top|--bogus"
        "64|--interval needs a value|top|--interval"
        "64|--interval takes a duration from 100ms to 1h|top|--interval|50ms"
        "64|--interval takes a duration from 100ms to 1h|top|--interval=2h"
        "64|--interval takes a duration from 100ms to 1h|top|--interval|x"
        "64|--max-locks takes a number from 1 to 100000|top|--max-locks|100001"
        "64|--max-keys takes a number from 1000 to 100000000|top|--max-keys|10"
        "64|--layout takes native, redisson or token|top|--layout|all"
        "64|bad pattern 'x\['|top|--once|x["
        "64|usage: rlock top|top|a|b"
    )
    local before after stats calls conns
    before=$(keys_snapshot)
    for row in "${rows[@]}"; do
        IFS='|' read -r -a f <<< "$row"
        want=${f[0]} pat=${f[1]}
        local args=() envs=()
        for x in "${f[@]:2}"; do
            x=${x//\{empty\}/}
            x=${x//\{sock\}/$sock}
            x=${x//\{long\}/$long}
            x=${x//\{ran\}/$dir/ran}
            case $x in
            ENV:-*) envs+=(-u "${x#ENV:-}") ;;
            ENV:*) envs+=("${x#ENV:}") ;;
            {nothing}) ;;
            *) args+=("$x") ;;
            esac
        done
        n=$((n + 1))
        rcli CONFIG RESETSTAT >/dev/null
        env "${envs[@]}" "$RLOCK" "${args[@]}" >"$dir/out" 2>"$dir/err"
        code=$?
        local what="rlock ${args[*]}"
        [ ${#envs[@]} = 0 ] || what="${envs[*]} $what"
        what=${what//$long/\{long\}}
        if [ "$code" != "$want" ]; then
            echo "FAIL $what: exit status $code, want $want" >&2; failed=1
        fi
        if [ -s "$dir/out" ]; then
            echo "FAIL $what: printed on stdout: $(head -c 300 "$dir/out")" >&2; failed=1
        fi
        if [ "$(wc -l < "$dir/err")" != 1 ]; then
            echo "FAIL $what: $(wc -l < "$dir/err") lines on stderr, want 1: $(head -c 300 "$dir/err")" >&2
            failed=1
        fi
        if ! head -1 "$dir/err" | grep -Eq -- "$pat"; then
            echo "FAIL $what: stderr does not name the problem (/$pat/): $(head -c 300 "$dir/err")" >&2
            failed=1
        fi
        # Since CONFIG RESETSTAT: the INFO below is the one connection, and
        # the only commands are the harness's own.
        stats=$(rcli INFO all | tr -d '\r')
        conns=$(sed -n 's/^total_connections_received://p' <<< "$stats")
        calls=$(grep '^cmdstat_' <<< "$stats" |
            grep -Ev '^cmdstat_(info|config\|resetstat):' |
            sed -E 's/^cmdstat_([^:]*):calls=([0-9]+).*/\1=\2/' | tr '\n' ' ')
        if [ "$conns" != 1 ] || [ -n "$calls" ]; then
            echo "FAIL $what: reached Redis: $((conns - 1)) connections, commands: ${calls:-none}" >&2
            failed=1
        fi
    done
    after=$(keys_snapshot)
    [ "$before" = "$after" ] || { echo "FAIL keys changed: before: $before after: $after" >&2; failed=1; }
    [ ! -e "$dir/ran" ] || { echo "FAIL a COMMAND ran" >&2; failed=1; }
    is_held held || { echo "FAIL the held lock is no longer held" >&2; failed=1; }
    kill "$table_holder"; wait "$table_holder" 2>/dev/null
    echo "$n rows"
    [ $failed = 0 ] || fail "some bad arguments were not refused as documented"
}

# rlock run, status and ping over TLS: certificates made here by openssl, a
# redis-server with a TLS port, the CA given by --cacert and in the URL; a
# wrong CA is refused (69) naming the cause.
case_tls_run_and_ping() {
    local k="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes" port
    (cd "$dir" &&
        openssl req -x509 $k -keyout ca.key -out ca.crt -days 2 \
            -subj /CN=rlock-cli-ca &&
        openssl req -x509 $k -keyout other.key -out other.crt -days 2 \
            -subj /CN=rlock-other-ca &&
        openssl req $k -keyout srv.key -out srv.csr -subj /CN=localhost &&
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > ext &&
        openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key \
            -CAcreateserial -out srv.crt -days 2 -extfile ext) \
        >/dev/null 2>&1 || fail "openssl could not make the certificates"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    start_redis --tls-port "$port" --tls-cert-file "$dir/srv.crt" \
        --tls-key-file "$dir/srv.key" --tls-ca-cert-file "$dir/ca.crt" \
        --tls-auth-clients no
    local url="rediss://127.0.0.1:$port"
    "$RLOCK" --cacert "$dir/ca.crt" --redis "$url" run tls-job -- \
        sh -c 'echo "$RLOCK_TOKEN" > "$0/token"' "$dir"
    expect_code 0 $? "run over TLS"
    [ -s "$dir/token" ] || fail "COMMAND did not run over TLS"
    "$RLOCK" --redis "$url?cacert=$dir/ca.crt" ping | grep -q PONG ||
        fail "ping over TLS (CA in the URL)"
    "$RLOCK" --cacert "$dir/ca.crt" --redis "$url" status tls-job |
        grep -q "tls-job" || fail "status over TLS"
    "$RLOCK" --cacert "$dir/other.crt" --redis "$url" ping 2>"$dir/err"
    expect_code 69 $? "ping over TLS with the wrong CA"
    grep -q "not trusted" "$dir/err" || fail "wrong CA: $(cat "$dir/err")"
}

# ---- COMMAND's whole process tree (rlock run as flock(1) for trees) ----

# The pids a tree wrote to $dir/pids that are still alive.
alive() { local p; for p in $(cat "$dir/pids" 2>/dev/null); do kill -0 "$p" 2>/dev/null && echo "$p"; done; }
# Waits (20 s at most) until Redis drops KEY, the lease's end, then fails if
# any process of the tree is alive at that moment (and kills what is).
none_alive_at_lease_end() {
    local t0 left; t0=$(ms)
    until [ "$(rcli EXISTS "$1")" = 0 ]; do
        [ $(( $(ms) - t0 )) -lt 20000 ] || fail "the lease never ended"
        sleep 0.02
    done
    left=$(alive)
    [ -z "$left" ] || { kill -KILL $left; fail "alive at the lease end: $left"; }
}
npids() { [ "$(cat "$dir/pids" 2>/dev/null | wc -l)" -ge "$1" ]; }

# A tree of five processes, each writing its pid to $dir/pids: the shell
# COMMAND; a child that, told to stop, takes 1 s more (and forks a sleep
# meanwhile); a grandchild orphaned at once (double fork); one in a session
# and process group of its own (setsid); and a sleep child of COMMAND.
# With "stubborn", the second child ignores SIGTERM altogether.
start_tree() { # start_tree NAME [stubborn] (sets tree_pid)
    local on_term='sleep 1; exit 0'
    [ "${2:-}" = stubborn ] && on_term=''
    rm -f "$dir/pids"
    "$RLOCK" run "$1" -- sh -c '
        echo $$ >> "$D/pids"
        sh -c "trap \"$T\" TERM; echo \$\$ >> \"$D/pids\"; while :; do sleep 0.1; done" &
        sh -c "sleep 300 & echo \$! >> \"$D/pids\"" &
        setsid sh -c "echo \$\$ >> \"$D/pids\"; exec sleep 300" &
        sleep 300 & echo $! >> "$D/pids"
        wait' 2>"$dir/err" &
    tree_pid=$!
    export -n D T
    wait_for 10 npids 5 || fail "the tree did not start: $(cat "$dir/pids" 2>/dev/null)"
}

# While any process of the tree lives, the lock is held: a release seen
# first and a live process seen after it is the failure.
held_while_tree_lives() { # NAME
    while [ -n "$(alive)" ]; do
        if ! is_held "$1"; then
            local left; left=$(alive)
            [ -z "$left" ] || fail "lock $1 released while $left still ran"
        fi
        sleep 0.05
    done
}

case_sigterm_stops_the_whole_tree_before_release() {
    start_redis
    set -m # background jobs of a script ignore SIGINT unless job control is on
    local s
    for s in TERM INT HUP; do
        D=$dir T='sleep 1; exit 0'; export D T
        start_tree tree
        kill -$s $tree_pid
        held_while_tree_lives tree
        local want=$((128 + $(kill -l $s)))
        wait $tree_pid; expect_code $want $? "status after SIG$s"
        [ -z "$(alive)" ] || fail "left running after SIG$s: $(alive)"
        "$RLOCK" status tree | grep -q "tree: free" || fail "lock held after SIG$s"
    done
    # A tree that ignores SIGTERM is killed after --kill-after.
    D=$dir T=''; export D T
    rm -f "$dir/pids"
    "$RLOCK" run --kill-after=500ms tree -- sh -c '
        trap "" TERM; echo $$ >> "$D/pids"
        sh -c "trap \"\" TERM; sleep 300 & echo \$! >> \"$D/pids\"; wait" &
        wait' &
    tree_pid=$!
    export -n D T
    wait_for 10 npids 2 || fail "no tree"
    local t0; t0=$(ms)
    kill -TERM $tree_pid
    held_while_tree_lives tree
    wait $tree_pid
    [ -z "$(alive)" ] || fail "SIGKILL did not end the tree"
    [ $(( $(ms) - t0 )) -lt $(( 4000 * slow )) ] || fail "--kill-after 500ms took $(( $(ms) - t0 )) ms"
    # Background processes left by COMMAND keep the lock until they end,
    # as they would keep a flock(1) lock.
    rm -f "$dir/pids"
    "$RLOCK" run bg -- sh -c "sleep 1.5 & echo \$! >> '$dir/pids'; exit 0" &
    tree_pid=$!
    wait_for 10 npids 1 || fail "no background child"
    held_while_tree_lives bg
    wait $tree_pid; expect_code 0 $? "COMMAND's own status"
    "$RLOCK" status bg | grep -q "bg: free" || fail "bg lock held at the end"
}

# Every catchable signal is passed on to the tree or handled: none kills
# rlock run while COMMAND runs; -q leaves a conflict to the exit status.
case_signals_are_passed_on_and_quiet_is_quiet() {
    start_redis
    set -m # else a script's background job starts with SIGQUIT ignored
    local s
    rm -f "$dir/got"
    "$RLOCK" run sigs -- sh -c "
        for s in USR1 USR2 ALRM QUIT WINCH ABRT BUS; do trap \"echo \$s >> '$dir/got'\" \$s; done
        echo ready >> '$dir/got'
        while [ ! -e '$dir/stop' ]; do sleep 0.05; done" &
    local pid=$!
    wait_for 10 grep -q ready "$dir/got" || fail "COMMAND did not start"
    # SIGABRT and SIGBUS too: a fault's signals, sent by another process.
    for s in USR1 USR2 ALRM QUIT WINCH ABRT BUS; do
        kill -$s $pid
        wait_for 5 grep -q $s "$dir/got" || fail "SIG$s did not reach COMMAND"
    done
    kill -0 $pid || fail "a signal killed rlock run"
    is_held sigs || fail "lock not held"
    "$RLOCK" run -n -q sigs -- true 2>"$dir/err"; expect_code 1 $? "-n -q on a held lock"
    [ ! -s "$dir/err" ] || fail "-q printed: $(cat "$dir/err")"
    "$RLOCK" run --quiet -w 200ms sigs -- true 2>"$dir/err"; expect_code 1 $? "-q -w"
    [ ! -s "$dir/err" ] || fail "--quiet printed: $(cat "$dir/err")"
    touch "$dir/stop"
    wait $pid; expect_code 0 $? "COMMAND's status"
}

# rlock run killed outright: the keeper stops the tree (SIGTERM, then
# SIGKILL within a third of the lease); nothing of it is alive when Redis
# lets the lease go.
case_sigkill_of_rlock_stops_the_tree_before_the_lease_ends() {
    start_redis
    export RLOCK_WATCHDOG_LEASE=3s
    D=$dir T=''; export D T
    start_tree k stubborn
    kill -KILL $tree_pid
    none_alive_at_lease_end '{rlock:k}'
    wait $tree_pid 2>/dev/null
    unset RLOCK_WATCHDOG_LEASE
}

# rlock run and its keeper killed together, as `timeout -s KILL` or a job
# control kill does to a process group: COMMAND dies by its parent-death
# signal, but its children have none. The keeper, in a process group of
# its own, outlives rlock run and stops them before Redis lets the lease go.
case_sigkill_of_the_process_group_stops_the_tree() {
    start_redis
    export RLOCK_WATCHDOG_LEASE=3s
    set -m # the job gets a process group of its own, named by its pid
    rm -f "$dir/pids"
    D=$dir "$RLOCK" run pg -- sh -c '
        echo $$ >> "$D/pids"
        sleep 300 & echo $! >> "$D/pids"
        sleep 300 & echo $! >> "$D/pids"
        wait' 2>"$dir/err" &
    local pid=$!
    wait_for 10 npids 3 || fail "the tree did not start: $(cat "$dir/pids" 2>/dev/null)"
    [ "$(ps -o pgid= -p "$pid" | tr -d ' ')" = "$pid" ] ||
        fail "rlock run does not lead its process group"
    kill -KILL -- -"$pid"
    none_alive_at_lease_end '{rlock:pg}'
    wait "$pid" 2>/dev/null
    unset RLOCK_WATCHDOG_LEASE
}

# A fixed --lease is not renewed, so rlock run may be killed with little of
# it left: the keeper's grace (a third of the lease here) is cut to what is
# left, and a tree that ignores SIGTERM is killed before Redis drops the key.
case_sigkill_late_in_a_fixed_lease_stops_the_tree_within_it() {
    start_redis
    rm -f "$dir/pids"
    D=$dir "$RLOCK" run --lease 4s --kill-after 10s fl -- sh -c '
        trap "" TERM; echo $$ >> "$D/pids"
        sleep 300 & echo $! >> "$D/pids"
        wait' 2>"$dir/err" &
    local pid=$!
    wait_for 10 npids 2 || fail "the tree did not start: $(cat "$dir/pids" 2>/dev/null)"
    # The lock was taken before the tree started: 3 s into the lease at
    # least, a third of it (1.3 s) would outlast it.
    sleep 3
    kill -KILL "$pid"
    none_alive_at_lease_end '{rlock:fl}'
    wait "$pid" 2>/dev/null
}

# rlock run stopped (kill -STOP: a debugger, a frozen cgroup) renews
# nothing: the keeper ends the tree by the lease end on its own clock, and
# another owner's run never overlaps it.
case_stopped_rlock_run_stops_the_tree_by_the_lease_end() {
    start_redis
    export RLOCK_WATCHDOG_LEASE=900ms
    D=$dir T=''; export D T
    start_tree st stubborn
    kill -STOP $tree_pid
    none_alive_at_lease_end '{rlock:st}'
    "$RLOCK" run -n st -- true; expect_code 0 $? "a second owner after the lease"
    kill -CONT $tree_pid
    wait $tree_pid; expect_code 79 $? "the stopped run, resumed"
    unset RLOCK_WATCHDOG_LEASE
}

# A fixed --lease ends the tree within it, however COMMAND takes SIGTERM
# (--kill-after is cut to the lease), and a lease that would end before
# COMMAND could run starts nothing.
case_fixed_lease_ends_the_tree_within_it() {
    start_redis
    rm -f "$dir/pids"
    D=$dir "$RLOCK" run --lease 1500ms --kill-after 10s fx -- sh -c '
        trap "" TERM; echo $$ >> "$D/pids"
        sleep 300 & echo $! >> "$D/pids"
        wait' 2>"$dir/err" &
    local pid=$!
    wait_for 10 npids 2 || fail "the tree did not start: $(cat "$dir/pids" 2>/dev/null)"
    none_alive_at_lease_end '{rlock:fx}'
    wait "$pid"; expect_code 79 $? "a run whose fixed lease ended"
    rm -f "$dir/started"
    "$RLOCK" run --lease 1ms tiny -- touch "$dir/started" 2>"$dir/err"
    expect_code 79 $? "a 1 ms lease"
    [ ! -e "$dir/started" ] || fail "COMMAND ran with a lease that had ended"
    grep -q "too soon" "$dir/err" || fail "said: $(cat "$dir/err")"
}

# A lease that ends before COMMAND can start, however late rlock finds it
# out (the acquisition's own check, the token's draw, or the look before
# starting), is said to end too soon, exit 79, and COMMAND does not run.
# Under valgrind (cli_valgrind_*) rlock is slow enough that a 1 ms lease
# ends inside the lock call or the token's draw.
case_a_lease_that_ends_before_start_is_too_soon() {
    start_redis
    local i
    for i in 1 2 3; do
        rm -f "$dir/started"
        "$RLOCK" run --lease 1ms early -- touch "$dir/started" 2>"$dir/err"
        expect_code 79 $? "a 1 ms lease"
        [ ! -e "$dir/started" ] || fail "COMMAND ran with a lease that had ended"
        grep -q "too soon" "$dir/err" || fail "said: $(cat "$dir/err")"
    done
}

# ^Z at a terminal: COMMAND and rlock stop as one job, the shell gets its
# prompt back, and fg lets them go on (tests/cli/pty_job.py drives bash in
# a pseudo-terminal).
case_ctrl_z_stops_the_job_and_fg_resumes_it() {
    start_redis
    command -v python3 >/dev/null || fail "python3 is needed"
    python3 "$here/pty_job.py" "$RLOCK" "$dir" || fail "the job did not stop and resume"
}

case_lost_lock_stops_the_whole_tree() {
    start_redis
    export RLOCK_WATCHDOG_LEASE=600ms
    D=$dir T='sleep 0.5; exit 0'; export D T
    start_tree lt
    rcli DEL "{rlock:lt}" >/dev/null
    wait $tree_pid; expect_code 79 $? "lost lock"
    [ -z "$(alive)" ] || fail "left running after the loss: $(alive)"
    grep -q "lost while the command ran" "$dir/err" || fail "no message: $(cat "$dir/err")"
    unset RLOCK_WATCHDOG_LEASE
}

# The password is in no process's command line nor in COMMAND's
# environment; COMMAND has the descriptors it would have without rlock.
case_secrets_and_descriptors_stay_out_of_command() {
    AUTH=s3cret start_redis --requirepass s3cret
    local url="unix://:s3cret@$dir/redis.sock" base
    unset RLOCK_URL
    # What a shell started directly has open.
    sh -c 'ls /proc/$$/fd > "$0/fds0"' "$dir"
    base=$(sort "$dir/fds0" | tr '\n' ' ')
    "$RLOCK" --redis "$url" run sec -- sh -c '
        ls /proc/$$/fd > "$0/fds1"
        env > "$0/env"
        k=$PPID; r=$(ps -o ppid= -p $k | tr -d " ")
        tr "\0" " " < /proc/$k/cmdline > "$0/keeper-cmdline"
        tr "\0" " " < /proc/$r/cmdline > "$0/rlock-cmdline"' "$dir"
    expect_code 0 $? "run with a password in the URL"
    [ "$(sort "$dir/fds1" | tr '\n' ' ')" = "$base" ] ||
        fail "COMMAND's descriptors: $(sort "$dir/fds1" | tr '\n' ' '), want $base"
    ! grep -q s3cret "$dir/env" "$dir/keeper-cmdline" "$dir/rlock-cmdline" ||
        fail "the password leaked: $(grep s3cret "$dir/env" "$dir/keeper-cmdline" "$dir/rlock-cmdline")"
    grep -qx "RLOCK_URL=unix://$dir/redis.sock" "$dir/env" || fail "RLOCK_URL: $(grep RLOCK_URL "$dir/env")"
    grep -q -- "--redis unix://:\*\*\*\*\*\*@" "$dir/rlock-cmdline" || fail "argv: $(cat "$dir/rlock-cmdline")"
    # The --redis=URL form is overwritten as well.
    "$RLOCK" --redis="$url" run sec -- sh -c '
        r=$(ps -o ppid= -p $PPID | tr -d " ")
        tr "\0" " " < /proc/$r/cmdline > "$0/rlock-cmdline"' "$dir"
    expect_code 0 $? "run with --redis=URL"
    ! grep -q s3cret "$dir/rlock-cmdline" || fail "the password leaked: $(cat "$dir/rlock-cmdline")"
    grep -q -- "--redis=unix://:\*\*\*\*\*\*@" "$dir/rlock-cmdline" || fail "argv: $(cat "$dir/rlock-cmdline")"
    # REDIS_URL reaches COMMAND without its password, as RLOCK_URL does,
    # whether rlock took its server from it or not.
    REDIS_URL=$url "$RLOCK" run sec -- sh -c 'env > "$0/env"' "$dir"
    expect_code 0 $? "run with REDIS_URL"
    ! grep -q s3cret "$dir/env" || fail "the password leaked: $(grep s3cret "$dir/env")"
    grep -qx "REDIS_URL=unix://$dir/redis.sock" "$dir/env" || fail "REDIS_URL: $(grep REDIS_URL "$dir/env")"
    REDIS_URL="redis://u:topsecret@127.0.0.1:1/2" "$RLOCK" --redis "$url" run sec -- sh -c 'env > "$0/env"' "$dir"
    expect_code 0 $? "run with an unused REDIS_URL"
    ! grep -q topsecret "$dir/env" || fail "the password leaked: $(grep topsecret "$dir/env")"
    grep -qx "REDIS_URL=redis://u@127.0.0.1:1/2" "$dir/env" || fail "REDIS_URL: $(grep REDIS_URL "$dir/env")"
    # From a file, and from the environment (not passed on to COMMAND).
    printf 's3cret\n' > "$dir/pw"
    "$RLOCK" --redis "unix://$dir/redis.sock" --password-file "$dir/pw" ping >/dev/null
    expect_code 0 $? "--password-file"
    RLOCK_PASSWORD=s3cret "$RLOCK" --redis "unix://$dir/redis.sock" run sec -- sh -c 'env > "$0/env"' "$dir"
    expect_code 0 $? "RLOCK_PASSWORD"
    ! grep -q s3cret "$dir/env" || fail "RLOCK_PASSWORD reached COMMAND"
    printf 'wrong\n' > "$dir/pw"
    "$RLOCK" --redis "unix://$dir/redis.sock" --password-file="$dir/pw" ping 2>/dev/null
    expect_code 77 $? "a wrong password from a file"
}

# What Redis holds reaches the terminal escaped, and --json is valid UTF-8
# whatever the bytes. (A Redisson-layout owner field may hold any bytes
# before its ":<thread>"; the token layout refuses such values as data.)
case_output_is_escaped_and_json_is_utf8() {
    start_redis
    rcli HSET esc "$(printf 'evil\033[2J\377\r\\:7')" 1 >/dev/null
    rcli PEXPIRE esc 60000 >/dev/null
    "$RLOCK" status --layout redisson esc > "$dir/out"; expect_code 0 $? "status"
    ! grep -q "$(printf '\033')" "$dir/out" || fail "an escape byte reached the output"
    grep -qF 'held by evil\x1b[2J\xff\x0d\\:7' "$dir/out" || fail "status: $(cat -v "$dir/out")"
    "$RLOCK" status --json --layout=redisson esc > "$dir/out"; expect_code 0 $? "status --json"
    python3 -c 'import json,sys; d=json.loads(open(sys.argv[1],"rb").read().decode("utf-8")); assert d["holder"]=="evil\x1b[2J\\xff\r\\:7", d' "$dir/out" ||
        fail "--json: $(cat -v "$dir/out")"
    # The error message of a refused key is escaped too.
    printf 'evil\033[2J' | rcli -x SET "$(printf 'k\033[2J')" >/dev/null
    "$RLOCK" status --layout token "$(printf 'k\033[2J')" 2> "$dir/err"; expect_code 65 $? "status of data"
    ! grep -q "$(printf '\033')" "$dir/err" || fail "an escape byte reached stderr"
    grep -qF "'k\x1b[2J' is not a lock" "$dir/err" || fail "status said: $(cat -v "$dir/err")"
    "$RLOCK" ping | grep -Eq "^PONG from .*: (redis|valkey) [0-9]" || fail "ping: $("$RLOCK" ping)"
}

# The URL is never cut short: a long one (here 4000 bytes of parameters)
# reaches COMMAND as RLOCK_URL whole and is named whole in messages; one
# longer than rlock takes is refused, from the environment as from --redis.
case_long_urls_are_never_cut() {
    start_redis
    local url q
    q=$(printf '&tls=0%.0s' $(seq 640))
    url="unix://$dir/redis.sock?tls=0$q"
    RLOCK_URL=$url "$RLOCK" run long -- sh -c 'printf "%s" "$RLOCK_URL" > "$0/url"' "$dir"
    expect_code 0 $? "run with a ${#url}-byte URL"
    [ "$(cat "$dir/url")" = "$url" ] || fail "RLOCK_URL was $(wc -c < "$dir/url") bytes, want ${#url}"
    RLOCK_URL=$url "$RLOCK" ping > "$dir/out"; expect_code 0 $? "ping"
    grep -qF "PONG from $url: " "$dir/out" || fail "ping named $(head -c 100 "$dir/out")..."
    url="$url$q"
    RLOCK_URL=$url "$RLOCK" ping 2> "$dir/err"; expect_code 64 $? "a ${#url}-byte URL"
    grep -q "RLOCK_URL: the URL is longer than 4095 bytes" "$dir/err" || fail "said: $(head -c 300 "$dir/err")"
    "$RLOCK" --redis "$url" ping 2> "$dir/err"; expect_code 64 $? "a ${#url}-byte --redis"
    grep -q "redis: the URL is longer than 4095 bytes" "$dir/err" || fail "said: $(head -c 300 "$dir/err")"
}

# What rlock run says on stderr escapes bytes from Redis and lock names, as
# status does: here Redis's own error text (EVALSHA renamed away, so Redis
# quotes the keys back), a conflict and a loss.
case_run_messages_are_escaped() {
    local n esc
    n=$(printf 'n\033[31m')
    esc='n\x1b[31m'
    start_redis --rename-command EVALSHA "" --rename-command EVAL ""
    "$RLOCK" run "$n" -- true 2> "$dir/err"; expect_code 76 $? "run with EVALSHA renamed"
    grep -q "unknown command" "$dir/err" || fail "no Redis error text: $(cat -v "$dir/err")"
    ! grep -q "$(printf '\033')" "$dir/err" || fail "an escape byte reached stderr: $(cat -v "$dir/err")"
    grep -qF ": $esc (Redis returned an error): " "$dir/err" || fail "said: $(cat -v "$dir/err")"
    grep -qF "'{rlock:$esc}'" "$dir/err" || fail "said: $(cat -v "$dir/err")"
    kill "$redis_pid"; wait "$redis_pid" 2>/dev/null; rm -f "$dir/redis.sock"
    start_redis
    export RLOCK_WATCHDOG_LEASE=600ms
    "$RLOCK" run "$n" -- sleep $((10 * slow)) 2> "$dir/lost" &
    local pid=$!
    wait_for 5 is_held "$n" || fail "no hold"
    "$RLOCK" run -n "$n" -- true 2> "$dir/err"; expect_code 1 $? "-n on a held lock"
    ! grep -q "$(printf '\033')" "$dir/err" || fail "an escape byte reached stderr: $(cat -v "$dir/err")"
    grep -qF "$esc is held by another owner" "$dir/err" || fail "said: $(cat -v "$dir/err")"
    rcli DEL "{rlock:$n}" > /dev/null
    wait $pid; expect_code 79 $? "lost lock"
    ! grep -q "$(printf '\033')" "$dir/lost" || fail "an escape byte reached stderr: $(cat -v "$dir/lost")"
    grep -qF "lock $esc was lost" "$dir/lost" || fail "said: $(cat -v "$dir/lost")"
    unset RLOCK_WATCHDOG_LEASE
}

# The bash completion script, run by bash-completion as an interactive
# shell would: subcommands, options, option values, and COMMAND after --.
case_bash_completion_completes() {
    local script
    script=$(dirname "$0")/../../completions/rlock.bash
    complete_words() { # the words typed so far, the last one being completed
        bash -c '
            source /usr/share/bash-completion/bash_completion
            source "$0"
            COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 ))
            COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
            _rlock rlock "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
            printf "%s\n" "${COMPREPLY[@]}" | sort -u | tr "\n" " "' "$script" "$@"
    }
    [ "$(complete_words rlock st)" = "status " ] || fail "subcommand: '$(complete_words rlock st)'"
    [ "$(complete_words rlock run --on)" = "--on-lost " ] || fail "run option: '$(complete_words rlock run --on)'"
    [ "$(complete_words rlock run --layout re)" = "redisson " ] || fail "layout value"
    [ "$(complete_words rlock --pass)" = "--password-file " ] || fail "global option"
    [ "$(complete_words rlock run x -- ech)" = "echo " ] || fail "COMMAND: '$(complete_words rlock run x -- ech)'"
    [ "$(complete_words rlock to)" = "top " ] || fail "top: '$(complete_words rlock to)'"
    [ "$(complete_words rlock list --max-l)" = "--max-locks " ] || fail "list option"
    [ "$(complete_words rlock top --layout t)" = "token " ] || fail "top's layout"
}

# ---- rlock list and rlock top --------------------------------------------

# The names rlock list printed (its last column), sorted, one a line.
listed() { "$RLOCK" list "$@" | sed 1d | awk '{ print $NF }' | LC_ALL=C sort | tr '\n' ' '; }
is_held_as() { "$RLOCK" status --layout "$2" "$1" | grep -q "held by"; }

# Locks of every layout are found by their keys, each once (a queue's
# keys are not locks of their own); keys of other shapes under a lock's
# names are skipped; names are escaped as status escapes them, and --json
# is strict UTF-8.
case_list_finds_every_layout_and_skips_other_shapes() {
    start_redis
    local esc pids="" out
    esc=$(printf 'esc\033[2J\377')
    "$RLOCK" run nat -- sleep 60 & pids="$pids $!"
    "$RLOCK" run --layout token tok -- sleep 60 & pids="$pids $!"
    "$RLOCK" run --layout redisson red -- sleep 60 & pids="$pids $!"
    "$RLOCK" run "$esc" -- sleep 60 & pids="$pids $!"
    wait_for 5 is_held nat || fail "no native hold"
    wait_for 5 is_held_as tok token || fail "no token hold"
    wait_for 5 is_held_as red redisson || fail "no Redisson hold"
    wait_for 5 is_held "$esc" || fail "no hold of the escaped name"
    "$RLOCK" run nat -- true & pids="$pids $!"
    wait_for 5 waiting nat 1 || fail "the waiter is not queued"
    # A Redisson peer's hold (a hash, no counter): found by the walk over
    # the hashes. A token peer's hold (no counter): a string like any other.
    rcli HSET peer 8c6f8f22-0000-4000-8000-000000000001:7 1 >/dev/null
    rcli PEXPIRE peer 60000 >/dev/null
    rcli SET pyonly 0123456789abcdef0123456789abcdef PX 60000 >/dev/null
    # Keys of other shapes, where the walk looks for locks.
    rcli SET "{rlock:trap}" "hello world" PX 60000 >/dev/null   # no lock value
    rcli HSET data a 1 b 2 c 3 >/dev/null                       # not Redisson's
    rcli HSET noexpiry x:1 1 >/dev/null                         # no expiry
    rcli SET fake:rlock-fence 5 >/dev/null                      # beside a list
    rcli RPUSH fake a >/dev/null
    rcli SET "{rlock:gone}:fence" 99 >/dev/null                 # a free lock
    rcli SET plain v >/dev/null
    out=$(listed)
    [ "$out" = "esc\\x1b[2J\\xff nat peer red tok " ] || fail "list: '$out': $("$RLOCK" list)"
    "$RLOCK" list > "$dir/out"; expect_code 0 $? "list"
    ! grep -q "$(printf '\033')" "$dir/out" || fail "an escape byte reached the output"
    grep -Eq '^native +[0-9]+@[^ ]+ +[0-9.]+s +1 +1 +[0-9]+  nat$' "$dir/out" ||
        fail "the native line: $(cat "$dir/out")"
    grep -Eq '^redisson +8c6f8f22-0000-4000-80\.\.\. +[0-9.]+s +1 +0 +0  peer$' "$dir/out" ||
        fail "the peer's line: $(cat "$dir/out")"
    "$RLOCK" list --json > "$dir/out"; expect_code 0 $? "list --json"
    python3 - "$dir/out" <<'PY' || fail "--json: $(cat -v "$dir/out")"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1], "rb").read().decode("utf-8").splitlines()]
got = {(r["name"], r["layout"]) for r in rows}
want = {("esc\x1b[2J\\xff", "native"), ("nat", "native"), ("peer", "redisson"),
        ("red", "redisson"), ("tok", "token")}
assert got == want, got
nat = [r for r in rows if r["name"] == "nat"][0]
assert nat["held"] and nat["waiters"] == 1 and nat["count"] == 1 and nat["pid"] > 0, nat
PY
    # --all: the free lock its counter names too; never someone's data.
    out=$(listed --all)
    [ "$out" = "esc\\x1b[2J\\xff gone nat peer red tok " ] || fail "list --all: '$out'"
    # PATTERN is a glob on names; --layout one layout.
    [ "$(listed 'n*')" = "nat " ] || fail "list 'n*': '$(listed 'n*')'"
    [ "$(listed '?e[a-e]*')" = "peer red " ] || fail "list '?e[a-e]*': '$(listed '?e[a-e]*')'"
    [ "$(listed --layout token)" = "tok " ] || fail "--layout token: '$(listed --layout token)'"
    [ "$(listed --layout redisson 'p*')" = "peer " ] || fail "--layout redisson 'p*'"
    [ "$(listed 'esc\x1b*')" = "" ] || fail "a pattern is bytes, not escapes"
    [ "$(listed "$(printf 'esc\033*')")" = "esc\\x1b[2J\\xff " ] || fail "a pattern with ESC"
    # top: the same locks, without escape codes off a terminal.
    "$RLOCK" top --once --interval 100ms > "$dir/out"; expect_code 0 $? "top --once"
    ! grep -q "$(printf '\033')" "$dir/out" || fail "an escape code reached a pipe: $(cat -v "$dir/out")"
    for n in nat tok red peer 'esc\x1b[2J\xff'; do
        N=$n awk '$1 == ENVIRON["N"] { f = 1 } END { exit !f }' "$dir/out" ||
            fail "top --once lacks $n: $(cat "$dir/out")"
    done
    grep -Eq '^nat +native +[0-9]+@[^ ]+ +>[0-9]+s +[0-9.]+s +1 ' "$dir/out" ||
        fail "top's native row: $(cat "$dir/out")"
    # Refresh after refresh off a terminal; a lock whose keys are gone is
    # forgotten once a walk has been over every key.
    "$RLOCK" top --interval 100ms > "$dir/top" & pids="$pids $!"
    wait_for 5 grep -q '^locks: 5 busy of 10 found' "$dir/top" || fail "top: $(cat "$dir/top")"
    rcli DEL "{rlock:gone}:fence" >/dev/null
    wait_for 5 grep -q '^locks: 5 busy of 9 found' "$dir/top" || fail "top kept a lock gone: $(tail -12 "$dir/top")"
    # shellcheck disable=SC2086
    kill $pids 2>/dev/null
    # shellcheck disable=SC2086
    wait $pids 2>/dev/null
}

# A user that may not SCAN (or run the status script) is told so, exit 77;
# one that may not DBSIZE only loses the key count.
case_list_and_top_say_what_the_acl_refuses() {
    start_redis
    local sock="$dir/redis.sock" holder
    rcli ACL SETUSER noscan on '>pw' '~*' '&*' +@all -scan >/dev/null
    rcli ACL SETUSER noeval on '>pw' '~*' '&*' +@all -evalsha -eval >/dev/null
    rcli ACL SETUSER nosize on '>pw' '~*' '&*' +@all -dbsize >/dev/null
    "$RLOCK" run held -- sleep 30 & holder=$!
    wait_for 5 is_held held || fail "no hold"
    for cmd in list "top --once --interval 100ms"; do
        # shellcheck disable=SC2086
        "$RLOCK" --redis "unix://noscan:pw@$sock" $cmd >"$dir/out" 2>"$dir/err"
        expect_code 77 $? "$cmd without SCAN"
        [ "$(wc -l < "$dir/err")" = 1 ] || fail "$cmd: not one line: $(cat "$dir/err")"
        grep -q "walking the keys needs SCAN (ACL).*NOPERM.*'scan'" "$dir/err" ||
            fail "$cmd without SCAN said: $(cat "$dir/err")"
        grep -q pw "$dir/err" && fail "$cmd: the password was printed"
        # shellcheck disable=SC2086
        "$RLOCK" --redis "unix://noeval:pw@$sock" $cmd >"$dir/out" 2>"$dir/err"
        expect_code 77 $? "$cmd without EVALSHA"
        grep -q "held.*NOPERM.*'evalsha'" "$dir/err" ||
            fail "$cmd without EVALSHA said: $(cat "$dir/err")"
    done
    "$RLOCK" --redis "unix://nosize:pw@$sock" list >"$dir/out" 2>"$dir/err"
    expect_code 0 $? "list without DBSIZE"
    { grep -q ' held$' "$dir/out" && [ ! -s "$dir/err" ]; } ||
        fail "list without DBSIZE: $(cat "$dir/out" "$dir/err")"
    kill "$holder"; wait "$holder"
}

# The calls of a command since CONFIG RESETSTAT (0 if none).
calls_of() {
    rcli INFO commandstats | tr -d '\r' |
        sed -n "s/^cmdstat_$1:calls=\([0-9]*\).*/\1/p" | grep . || echo 0
}

# 100,000 locks (a third of each layout) among 1,200,000 keys: list reads
# them all in bounded time and commands; the default bounds stop it early
# and say so; top --once does a bounded part of the work, and the footer
# counts what the server counted. A pattern that matches a million keys
# that are no locks costs what the bounds allow, and says what it left out.
case_list_and_top_are_bounded_on_100k_locks_and_a_million_keys() {
    start_redis --enable-debug-command local
    local keys t0 took scans evals sizes shown per=33334 locks
    locks=$((3 * per))
    python3 "$here/populate_locks.py" $per | rcli --pipe > "$dir/pipe" ||
        fail "populate: $(cat "$dir/pipe")"
    rcli DEBUG POPULATE 1000000 other 24 >/dev/null
    keys=$(rcli DBSIZE)
    [ "$keys" = $((1000000 + 2 * locks)) ] || fail "DBSIZE $keys"

    rcli CONFIG RESETSTAT >/dev/null
    t0=$(ms)
    "$RLOCK" list --max-locks 200000 > "$dir/out" 2> "$dir/err"
    expect_code 0 $? "list of every lock"
    took=$(( $(ms) - t0 ))
    scans=$(calls_of scan) evals=$(calls_of evalsha) sizes=$(calls_of dbsize)
    shown=$(( $(wc -l < "$dir/out") - 1 ))
    echo "list, every lock: $shown locks, $took ms, SCAN $scans, EVALSHA $evals, DBSIZE $sizes"
    [ "$shown" = $locks ] || fail "listed $shown locks, want $locks: $(head -c 500 "$dir/err")"
    [ ! -s "$dir/err" ] || fail "list said: $(cat "$dir/err")"
    # Two walks (every key, then the hashes), about 1000 keys a step.
    [ "$scans" -le $(( 2 * (keys / 1000 + 100) )) ] || fail "$scans SCANs for $keys keys"
    [ "$evals" = $locks ] || fail "$evals EVALSHAs for $locks locks"
    [ "$sizes" = 2 ] || fail "$sizes DBSIZEs"
    [ $took -lt $((40000 * slow)) ] || fail "list took $took ms"
    for n in n:0 t:17 r:33333; do
        grep -q " $n\$" "$dir/out" || fail "$n not listed"
    done

    rcli CONFIG RESETSTAT >/dev/null
    t0=$(ms)
    "$RLOCK" list > "$dir/out" 2> "$dir/err"; expect_code 0 $? "list"
    took=$(( $(ms) - t0 ))
    scans=$(calls_of scan) evals=$(calls_of evalsha)
    echo "list, default bounds: $took ms, SCAN $scans, EVALSHA $evals: $(cat "$dir/err")"
    [ "$(( $(wc -l < "$dir/out") - 1 ))" = 10000 ] || fail "list printed $(wc -l < "$dir/out") lines"
    [ "$evals" = 10000 ] || fail "list read $evals locks"
    grep -q "^rlock list: more than 10000 locks to read (--max-locks): the walk stopped after about [0-9]* of $keys keys ([0-9]*%); the locks beyond were left out$" "$dir/err" ||
        fail "list said: $(cat "$dir/err")"
    [ $took -lt $((15000 * slow)) ] || fail "list took $took ms"

    rcli CONFIG RESETSTAT >/dev/null
    t0=$(ms)
    "$RLOCK" top --once --interval 200ms > "$dir/out" 2> "$dir/err"
    expect_code 0 $? "top --once"
    took=$(( $(ms) - t0 ))
    scans=$(calls_of scan) evals=$(calls_of evalsha) sizes=$(calls_of dbsize)
    echo "top --once: $took ms, SCAN $scans, EVALSHA $evals, DBSIZE $sizes"
    [ "$scans.$evals.$sizes" = 50.400.2 ] ||
        fail "top --once: SCAN $scans, EVALSHA $evals, DBSIZE $sizes"
    grep -q "^this refresh: $((scans + evals + sizes)) commands ($((scans + sizes)) walking the keys, $evals reading locks)$" "$dir/out" ||
        fail "top's footer: $(cat "$dir/out")"
    grep -Eq '^left out: [0-9]+ of [0-9]+ locks not read \(--max-locks 200\); [0-9]+ rows below$' "$dir/out" ||
        fail "top's footer: $(cat "$dir/out")"
    grep -Eq "^locks: [0-9]+ busy of [0-9]+ found - walk 1: about 50000 of $keys keys \(4%\)$" "$dir/out" ||
        fail "top's header: $(cat "$dir/out")"
    [ "$(wc -l < "$dir/out")" = 24 ] || fail "top --once printed $(wc -l < "$dir/out") lines"
    [ $took -lt $((10000 * slow)) ] || fail "top --once took $took ms"

    # A pattern that a million keys match, none of them a lock.
    rcli CONFIG RESETSTAT >/dev/null
    "$RLOCK" list --max-keys 100000 'other:*' > "$dir/out" 2> "$dir/err"
    expect_code 0 $? "list 'other:*'"
    scans=$(calls_of scan) evals=$(calls_of evalsha)
    [ ! -s "$dir/out" ] || fail "list 'other:*' printed $(head -3 "$dir/out")"
    [ "$scans" -le 100 ] || fail "list 'other:*': $scans SCANs"
    [ "$evals" = 0 ] || fail "list 'other:*': $evals EVALSHAs"
    grep -q "^rlock list: the walk stopped after about 100000 of $keys keys (8%) (--max-keys 100000); the locks beyond were left out$" "$dir/err" ||
        fail "list 'other:*' said: $(cat "$dir/err")"
    rcli CONFIG RESETSTAT >/dev/null
    "$RLOCK" top --once --interval 100ms 'other:*' > "$dir/out"; expect_code 0 $? "top 'other:*'"
    [ "$(calls_of scan).$(calls_of evalsha)" = 50.0 ] ||
        fail "top 'other:*': SCAN $(calls_of scan), EVALSHA $(calls_of evalsha)"
    grep -q "(no lock held, waited for or taken since the last look)" "$dir/out" ||
        fail "top 'other:*': $(cat "$dir/out")"
}

# On a cluster, list asks every master (a SCAN on each), and finds the
# locks wherever their slots are.
case_list_asks_every_master_of_a_cluster() {
    start_cluster
    local pids="" i hp out
    for i in $(seq 12); do
        "$RLOCK" run "c$i" -- sleep 60 & pids="$pids $!"
    done
    "$RLOCK" run --layout token "{tk}:1" -- sleep 60 & pids="$pids $!"
    "$RLOCK" run --layout redisson rd -- sleep 60 & pids="$pids $!"
    for i in $(seq 12); do wait_for 10 is_held "c$i" || fail "c$i not held"; done
    wait_for 10 is_held_as "{tk}:1" token || fail "no token hold"
    wait_for 10 is_held_as rd redisson || fail "no Redisson hold"
    for hp in $cluster_ports; do redis-cli -p "${hp##*:}" CONFIG RESETSTAT >/dev/null; done
    out=$(listed)
    [ "$out" = "c1 c10 c11 c12 c2 c3 c4 c5 c6 c7 c8 c9 rd {tk}:1 " ] || fail "list: '$out'"
    for hp in $cluster_ports; do
        redis-cli -p "${hp##*:}" INFO commandstats | grep -q '^cmdstat_scan:calls=[1-9]' ||
            fail "master $hp was not asked"
    done
    "$RLOCK" top --once --interval 100ms | grep -q '^c7 ' || fail "top on the cluster"
    # shellcheck disable=SC2086
    kill $pids 2>/dev/null
    # shellcheck disable=SC2086
    wait $pids 2>/dev/null
}

# Through Redlock every node is walked and a lock is one line; through
# Sentinel, the master is.
case_list_on_redlock_and_sentinel_shows_each_lock_once() {
    local p1 p2 p3 sp holder
    start_tcp_redis; p1=$tcp_port
    start_tcp_redis; p2=$tcp_port
    start_tcp_redis; p3=$tcp_port
    export RLOCK_URL="redlock://127.0.0.1:$p1,127.0.0.1:$p2,127.0.0.1:$p3"
    "$RLOCK" run rl -- sleep 30 & holder=$!
    wait_for 5 is_held rl || fail "no Redlock hold"
    [ "$(listed)" = "rl " ] || fail "list on Redlock: '$(listed)'"
    "$RLOCK" top --once --interval 100ms | grep -q "^rl " || fail "top on Redlock"
    kill "$holder"; wait "$holder"
    for _ in 1 2 3 4 5; do # a free port, as for the servers
        sp=$(( 20000 + RANDOM % 30000 ))
        printf 'sentinel monitor m 127.0.0.1 %s 1\n' "$p1" > "$dir/sentinel.conf"
        setpriv --pdeathsig KILL "$SERVER" "$dir/sentinel.conf" --sentinel \
            --port "$sp" --bind 127.0.0.1 --dir "$dir" >"$dir/sentinel.log" 2>&1 &
        echo $! >> "$dir/tcp-pids"
        wait_for 5 redis-cli -p "$sp" sentinel get-master-addr-by-name m >/dev/null && break
    done
    export RLOCK_URL="redis-sentinel://127.0.0.1:$sp/m"
    "$RLOCK" run sl -- sleep 30 & holder=$!
    wait_for 5 is_held sl || fail "no hold through the sentinel"
    [ "$(listed)" = "sl " ] || fail "list through the sentinel: '$(listed)'"
    kill "$holder"; wait "$holder"
}

# rlock top in a terminal (tmux), its screen read back: it draws the
# busiest locks and redraws in place, s sorts by the next column, a new
# window size is drawn at once; q, ^C and ^Z give the terminal back as it
# was (the shell's screen, its stty settings), and fg draws the view again.
case_top_in_a_terminal_sorts_resizes_and_gives_the_terminal_back() {
    command -v tmux >/dev/null || fail "tmux is needed (tools/deps.sh --tests)"
    start_redis
    local tm=(tmux -L "rlock-test-$$" -f /dev/null) pids=""
    # shellcheck disable=SC2317 # (called by wait_for)
    screen() { "${tm[@]}" capture-pane -p -t top; }
    shows() { screen | grep -Eq -- "$1"; }
    # The first row of locks (the one under the column names).
    # shellcheck disable=SC2317
    first_is() { [ "$(screen | sed -n '/^NAME /{n;p;q}' | awk '{ print $1 }')" = "$1" ]; }
    # Drawn for a width: the column names there, no line wider.
    # shellcheck disable=SC2317
    fits() { shows '^NAME ' && [ "$(screen | awk -v w="$1" 'length > w' | wc -l)" = 0 ]; }
    ( while "$RLOCK" run hot -- sleep 0.02; do :; done ) & pids="$pids $!"
    "$RLOCK" run held -- sleep 60 & pids="$pids $!"
    wait_for 5 is_held held || fail "no hold"
    "$RLOCK" run held -- true & pids="$pids $!"
    "$RLOCK" run held -- true & pids="$pids $!"
    wait_for 5 waiting held 2 || fail "the waiters are not queued"
    "${tm[@]}" new-session -d -s top -x 100 -y 24 \
        "PS1='prompt\$ ' bash --norc --noprofile -i"
    trap '"${tm[@]}" kill-server 2>/dev/null; cleanup' EXIT
    wait_for 5 shows 'prompt\$' || fail "no shell in tmux: $(screen)"
    "${tm[@]}" send-keys -t top "stty -g > '$dir/stty.before'" Enter
    "${tm[@]}" send-keys -t top "'$RLOCK' top --interval 300ms; echo \"top exited \$?\"" Enter
    wait_for 10 shows '^rlock top - sort: acq/s \(s: next, q: quit\) - every 300ms - [0-9:]{8} - unix://' ||
        fail "no view: $(screen)"
    wait_for 10 first_is hot || fail "hot is not first by acq/s: $(screen)"
    shows '^held +native +[0-9]+@[^ ]+ +>?[0-9]+s +[0-9.]+s +2 ' || fail "held's row: $(screen)"
    shows '^hot +native .* [1-9][0-9.]*$' || fail "hot has no rate: $(screen)"
    shows '^this refresh: [0-9]+ commands' || fail "no footer: $(screen)"
    # s: sorted by waiters.
    "${tm[@]}" send-keys -t top s
    wait_for 5 shows 'sort: waiters' || fail "s did not sort: $(screen)"
    wait_for 5 first_is held || fail "held is not first by waiters: $(screen)"
    # A narrower window: drawn again at once, no line wider than it.
    "${tm[@]}" resize-window -t top -x 60 -y 20
    wait_for 5 fits 60 || fail "not redrawn for 60 columns: $(screen)"
    # q: the shell's screen again, and the terminal as it was.
    "${tm[@]}" send-keys -t top q
    # (Not at a line's start: after the resize, the terminal may put the
    # cursor back at the end of the wrapped command line.)
    wait_for 5 shows 'top exited 0$' || fail "q did not quit: $(screen)"
    shows '^rlock top -' && fail "the view is still on the screen: $(screen)"
    "${tm[@]}" send-keys -t top "stty -g > '$dir/stty.after'" Enter
    wait_for 5 test -s "$dir/stty.after" || fail "no stty"
    cmp -s "$dir/stty.before" "$dir/stty.after" ||
        fail "terminal not restored: $(diff "$dir/stty.before" "$dir/stty.after")"
    # ^C: the same, and rlock dies of SIGINT, as the shell expects.
    "${tm[@]}" send-keys -t top clear Enter
    "${tm[@]}" send-keys -t top "'$RLOCK' top --interval 300ms; echo \"top exited \$?\"" Enter
    wait_for 10 shows '^rlock top -' || fail "no view again: $(screen)"
    "${tm[@]}" send-keys -t top C-c
    # Killed by SIGINT, as bash sees it: the rest of the line is dropped.
    wait_for 5 eval '! shows "^rlock top -"' || fail "^C left the view: $(screen)"
    "${tm[@]}" send-keys -t top 'echo "top status $?"' Enter
    wait_for 5 shows '^top status 130$' || fail "^C: $(screen)"
    rm -f "$dir/stty.after"
    "${tm[@]}" send-keys -t top "stty -g > '$dir/stty.after'" Enter
    wait_for 5 test -s "$dir/stty.after" || fail "no stty"
    cmp -s "$dir/stty.before" "$dir/stty.after" || fail "^C left the terminal changed"
    # ^Z: stopped with the terminal given back; fg draws the view again.
    "${tm[@]}" send-keys -t top clear Enter
    "${tm[@]}" send-keys -t top "'$RLOCK' top --interval 300ms; echo \"top exited \$?\"" Enter
    wait_for 10 shows '^rlock top -' || fail "no view again: $(screen)"
    "${tm[@]}" send-keys -t top C-z
    wait_for 5 shows 'Stopped' || fail "^Z: $(screen)"
    shows '^rlock top -' && fail "^Z left the view on the screen: $(screen)"
    rm -f "$dir/stty.after"
    "${tm[@]}" send-keys -t top "stty -g > '$dir/stty.after'" Enter
    wait_for 5 test -s "$dir/stty.after" || fail "no stty"
    cmp -s "$dir/stty.before" "$dir/stty.after" || fail "^Z left the terminal changed"
    "${tm[@]}" send-keys -t top fg Enter
    wait_for 5 shows '^rlock top -' || fail "fg did not draw the view: $(screen)"
    "${tm[@]}" send-keys -t top q
    # (The line's echo ran when the job stopped: fg runs top alone.)
    wait_for 5 eval '! shows "^rlock top -"' || fail "q after fg: $(screen)"
    "${tm[@]}" send-keys -t top 'echo "top status $?"' Enter
    wait_for 5 shows '^top status 0$' || fail "q after fg: $(screen)"
    # -v would write the events over the live view: refused, the view is
    # never drawn.
    "${tm[@]}" send-keys -t top clear Enter
    "${tm[@]}" send-keys -t top "'$RLOCK' top -v; echo \"top -v exited \$?\"" Enter
    wait_for 5 shows '^top -v exited 64$' || fail "top -v in a terminal: $(screen)"
    shows '^rlock top: -v writes the events' || fail "top -v said: $(screen)"
    "${tm[@]}" kill-server
    # shellcheck disable=SC2086
    kill $pids 2>/dev/null
    # shellcheck disable=SC2086
    wait $pids 2>/dev/null
}

# Every key with its value (DUMP leaves the TTL out), in name order.
keys_snapshot() {
    local k
    rcli DBSIZE
    for k in $(rcli --scan | sort); do
        printf '%s ' "$k"; rcli --no-raw DUMP "$k"
    done
}

declare -F "case_${1:-}" >/dev/null || fail "no case named '${1:-}'"
"case_$1"
[ -z "$(valgrind_reports)" ] || fail "valgrind reported errors"
echo "ok $1"
