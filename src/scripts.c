/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * The Lua scripts: every change rlock makes to Redis is one of these, so
 * each step (acquire, release, extend, renew, give up waiting, force
 * release) is atomic on the server. docs/protocol.md explains each one.
 *
 * Keys, always in this order (they share one cluster hash tag):
 *   KEYS[1] lock   hash {owner, count, token, attempt}, expires with the lease
 *   KEYS[2] fence  fencing token counter (INCR), never expires; starts at
 *                  the server's clock in microseconds
 *   KEYS[3] queue  list of waiting owners, oldest first
 *   KEYS[4] qttl   zset waiting owner -> deadline in server milliseconds
 *   KEYS[5] qinfo  hash waiting owner -> "lease_ms nonce" for its grant
 *
 * Times compared inside a script come from the server's own clock (TIME),
 * so client clocks never matter; only the order and liveness of waiters
 * depend on it, never mutual exclusion.
 */
#include "internal.h"

/* Helpers every script may use. replicate_commands() lets Redis 5 and 6
 * accept writes after TIME; Redis 7 always replicates effects. */
#define PRELUDE                                                                \
    "if redis.replicate_commands then redis.replicate_commands() end\n"        \
    "local function now_ms()\n"                                                \
    "  local t = redis.call('TIME')\n"                                         \
    "  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"     \
    "end\n"                                                                    \
    /* The next fencing token. A missing counter (a new name, or a Redis  */ \
    /* that restarted without persistence, or an evicted or deleted key)   */ \
    /* starts at the server's clock in microseconds: greater than every    */ \
    /* token handed out before, unless that clock stepped back or tokens   */ \
    /* were drawn faster than one per microsecond on average.              */ \
    /* (INCR of a missing key gives 1; the counter is never 0 otherwise.   */ \
    /* %.0f, not tostring: Lua would print 16 digits as 1.7e+15; exact     */ \
    /* below 2^53, unlike %d, which goes through a C long.)                */ \
    "local function next_token()\n"                                            \
    "  local n = redis.call('INCR', KEYS[2])\n"                                \
    "  if n ~= 1 then return string.format('%.0f', n) end\n"                   \
    "  local t = redis.call('TIME')\n"                                         \
    "  local seed = t[1] .. string.format('%06d', tonumber(t[2]))\n"           \
    "  redis.call('SET', KEYS[2], seed)\n"                                     \
    "  return seed\n"                                                          \
    "end\n"                                                                    \
    /* Takes a waiter out of the queue.                                    */ \
    "local function dequeue(who)\n"                                            \
    "  redis.call('LREM', KEYS[3], 0, who)\n"                                  \
    "  redis.call('ZREM', KEYS[4], who)\n"                                     \
    "  redis.call('HDEL', KEYS[5], who)\n"                                     \
    "end\n"                                                                    \
    /* Drops waiters at the head whose place expired; returns the first    */ \
    /* live one and its deadline.                                          */ \
    "local function live_head(now)\n"                                          \
    "  while true do\n"                                                        \
    "    local head = redis.call('LINDEX', KEYS[3], 0)\n"                      \
    "    if not head then return nil end\n"                                    \
    "    local dl = redis.call('ZSCORE', KEYS[4], head)\n"                     \
    "    if dl and tonumber(dl) > now then return head, tonumber(dl) end\n"    \
    "    dequeue(head)\n"                                                      \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    /* Publishes on the channel of the waiter's own client: the wake      */ \
    /* channel, ':', and the client's random id, the part of the owner id  */ \
    /* before its identity ("@host/pid") and thread.                       */ \
    "local function notify(channel, who, msg)\n"                               \
    "  local client = string.match(who, '^[^:@]*')\n"                          \
    "  redis.call('PUBLISH', channel .. ':' .. client, msg)\n"                 \
    "end\n"                                                                    \
    /* The lock is free: hand it to the first live waiter. The grant's    */ \
    /* lease is the waiter's own, but no longer than its place in the      */ \
    /* queue had left, so a waiter that died holds up others no longer     */ \
    /* than its place would have. The message tells the waiter its token,  */ \
    /* the nonce of the wait it granted, and the lease granted.            */ \
    "local function grant_head(channel)\n"                                     \
    "  if not redis.call('LINDEX', KEYS[3], 0) then return end\n"              \
    "  local now = now_ms()\n"                                                 \
    "  local head, dl = live_head(now)\n"                                      \
    "  if not head then return end\n"                                          \
    "  local info = redis.call('HGET', KEYS[5], head) or ''\n"                 \
    "  local lease, nonce = string.match(info, '^(%d+) (%d+)$')\n"             \
    "  dequeue(head)\n"                                                        \
    "  local grant = math.min(tonumber(lease) or (dl - now), dl - now)\n"      \
    "  nonce = nonce or '0'\n"                                                 \
    "  local token = next_token()\n"                                           \
    "  redis.call('HSET', KEYS[1], 'owner', head, 'count', 1,\n"               \
    "             'token', token, 'attempt', nonce)\n"                         \
    "  redis.call('PEXPIRE', KEYS[1], grant)\n"                                \
    "  notify(channel, head, head .. ' ' .. token .. ' ' .. nonce ..\n"        \
    "         ' ' .. grant)\n"                                                 \
    "end\n"

/*
 * ARGV: owner, lease_ms, mode, waiter_ttl_ms, channel, nonce, count, token.
 *   mode 'r': re-entry (the client holds it with that token and count);
 *   't': try; 'w': wait, that is, join the queue if busy. nonce names this
 *   acquisition (all attempts of one wait share it), so that a grant or a
 *   hold whose reply was lost can be recognised and undone exactly.
 * Counts are set, not added to: only the owner changes its count, so
 * "count = what I had + 1" is right even when an earlier request whose
 * reply was lost did it already.
 * Returns {1, token, count} when held (count > 1: a re-entry); {0, hint_ms}
 * when busy, hint_ms being how long the holder's lease lasts at most; {-1}
 * when a re-entry finds the hold gone.
 */
static const char acquire_lua[] =
    PRELUDE
    "local owner, lease, mode = ARGV[1], ARGV[2], ARGV[3]\n"
    "local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'count')\n"
    "if mode == 'r' then\n"
    "  if h[1] ~= owner or h[2] ~= ARGV[8] then return {-1} end\n"
    "  local n = tonumber(ARGV[7]) + 1\n"
    "  redis.call('HSET', KEYS[1], 'count', n)\n"
    "  redis.call('PEXPIRE', KEYS[1], lease)\n"
    "  return {1, h[2], n}\n"
    "end\n"
    "if h[1] == owner then\n"
    /* Granted to us while our message was on its way (or to an earlier   */
    /* wait of ours): claim it, counting its lease from this request.      */
    "  dequeue(owner)\n"
    "  redis.call('HSET', KEYS[1], 'attempt', ARGV[6])\n"
    "  redis.call('PEXPIRE', KEYS[1], lease)\n"
    "  return {1, h[2], tonumber(h[3])}\n"
    "end\n"
    /* The clock is read only when a queue is involved: an uncontended   */
    /* acquisition runs five commands (HMGET LINDEX INCR HSET PEXPIRE).    */
    "local now\n"
    "local function clock()\n"
    "  if not now then now = now_ms() end\n"
    "  return now\n"
    "end\n"
    "local function enqueue()\n"
    "  local ttl = tonumber(ARGV[4])\n"
    "  if redis.call('ZADD', KEYS[4], clock() + ttl, owner) == 1 then\n"
    "    redis.call('RPUSH', KEYS[3], owner)\n"
    "  end\n"
    "  redis.call('HSET', KEYS[5], owner, lease .. ' ' .. ARGV[6])\n"
    "  for i = 3, 5 do\n"
    "    if redis.call('PTTL', KEYS[i]) < ttl + 1000 then\n"
    "      redis.call('PEXPIRE', KEYS[i], ttl + 1000)\n"
    "    end\n"
    "  end\n"
    "end\n"
    "if h[1] then\n"
    "  if mode == 'w' then enqueue() end\n"
    "  return {0, redis.call('PTTL', KEYS[1])}\n"
    "end\n"
    "local head = nil\n"
    "if redis.call('LINDEX', KEYS[3], 0) then head = live_head(clock()) end\n"
    "if head and head ~= owner then\n"
    /* Free, but others queued first (its holder expired, or a release    */
    /* found nobody alive then): it is theirs.                             */
    "  if mode == 'w' then enqueue() end\n"
    "  grant_head(ARGV[5])\n"
    "  return {0, redis.call('PTTL', KEYS[1])}\n"
    "end\n"
    "if head then dequeue(owner) end\n"
    "local token = next_token()\n"
    "redis.call('HSET', KEYS[1], 'owner', owner, 'count', 1, 'token', token,\n"
    "           'attempt', ARGV[6])\n"
    "redis.call('PEXPIRE', KEYS[1], lease)\n"
    "return {1, token, 1}\n";

/*
 * ARGV: owner, token, channel, count (what the owner holds before this
 * release). Sets the count to count - 1, so a release retried after a lost
 * reply never releases twice. Returns the remaining count (0: released,
 * and handed to the first live waiter if there is one), or -1 if this
 * owner's hold with this token is not there (expired, deleted, released
 * by the lost first try, or another owner's lock, which is left untouched).
 */
static const char release_lua[] =
    PRELUDE
    "local h = redis.call('HMGET', KEYS[1], 'owner', 'token')\n"
    "if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return -1 end\n"
    "local n = tonumber(ARGV[4]) - 1\n"
    "if n > 0 then\n"
    "  redis.call('HSET', KEYS[1], 'count', n)\n"
    "  return n\n"
    "end\n"
    "redis.call('DEL', KEYS[1])\n"
    "grant_head(ARGV[3])\n"
    "return 0\n";

/* ARGV: owner, token, lease_ms. 1 if extended, 0 if the hold is gone
 * (never recreates the key). */
static const char extend_lua[] =
    "local h = redis.call('HMGET', KEYS[1], 'owner', 'token')\n"
    "if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return 0 end\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
    "return 1\n";

/* The watchdog's batch: KEYS are lock keys, ARGV holds (owner, token,
 * lease_ms) for each. Returns a 1 (renewed) or 0 (gone) per key. OWNS is
 * the layout's test that key i is still that owner's hold with that
 * token; it reads with redis.pcall, so that a key of another type under
 * one lock's name (someone's data put there after the hold was lost) is
 * that hold gone, not an error that fails the whole batch and lets every
 * other hold of the client expire. */
#define RENEW_LOOP(OWNS)                                                       \
    "local out = {}\n"                                                         \
    "for i, key in ipairs(KEYS) do\n" OWNS                                     \
    "    redis.call('PEXPIRE', key, ARGV[3 * i])\n"                            \
    "    out[i] = 1\n"                                                         \
    "  else\n"                                                                 \
    "    out[i] = 0\n"                                                         \
    "  end\n"                                                                  \
    "end\n"                                                                    \
    "return out\n"

static const char renew_lua[] = RENEW_LOOP(
    "  local h = redis.pcall('HMGET', key, 'owner', 'token')\n"
    "  if h[1] == ARGV[3 * i - 2] and h[2] == ARGV[3 * i - 1] then\n");

/* ARGV: owner, channel, nonce. An acquisition is given up: the owner's
 * place in the queue goes if that acquisition made it (its qinfo names the
 * nonce), and a hold that acquisition took without learning it (a grant
 * still on its way, or an attempt whose reply was lost) is given back.
 * Places and holds of a later acquisition carry another nonce and are left
 * alone. A free lock then goes to the first live waiter. */
static const char cancel_lua[] =
    PRELUDE
    "local info = redis.call('HGET', KEYS[5], ARGV[1])\n"
    "if not info or string.match(info, ' (%d+)$') == ARGV[3] then\n"
    "  dequeue(ARGV[1])\n"
    "end\n"
    "local h = redis.call('HMGET', KEYS[1], 'owner', 'attempt')\n"
    "if h[1] == ARGV[1] and h[2] == ARGV[3] then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "end\n"
    "if redis.call('EXISTS', KEYS[1]) == 0 then grant_head(ARGV[2]) end\n"
    "return 1\n";

/*
 * The operators' scripts (status, force) act only on keys shaped as this
 * layout keeps a lock; anything else is someone's data, left untouched:
 * they return {0, what it is} instead (reply.c). Each key is absent or of
 * its type, and the lock key is a hash of at most rlock's four fields,
 * among them the owner, with an expiry (every hold has a lease).
 */
#define NATIVE_SHAPE                                                           \
    "local function not_a_lock()\n"                                            \
    "  local want = {'hash', 'string', 'list', 'zset', 'hash'}\n"              \
    "  local role = {'lock key', 'fencing counter', 'queue key',\n"            \
    "                'queue deadline key', 'queue grant key'}\n"               \
    "  for i = 1, 5 do\n"                                                      \
    "    local t = redis.call('TYPE', KEYS[i]).ok\n"                           \
    "    if t ~= 'none' and t ~= want[i] then\n"                               \
    "      return 'its ' .. role[i] .. ' is a ' .. t\n"                        \
    "    end\n"                                                                \
    "  end\n"                                                                  \
    "  if redis.call('EXISTS', KEYS[1]) == 0 then return nil end\n"            \
    "  local n = redis.call('HLEN', KEYS[1])\n"                                \
    "  local known = {owner = 1, count = 1, token = 1, attempt = 1}\n"         \
    "  if n <= 4 then\n"                                                       \
    "    for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do\n"                \
    "      if not known[f] then n = 5 end\n"                                   \
    "    end\n"                                                                \
    "  end\n"                                                                  \
    "  if n > 4 or redis.call('HEXISTS', KEYS[1], 'owner') == 0 then\n"        \
    "    return 'its lock key is a hash with fields no rlock lock has'\n"      \
    "  end\n"                                                                  \
    "  if redis.call('PTTL', KEYS[1]) < 0 then\n"                              \
    "    return 'its lock key has no expiry'\n"                                \
    "  end\n"                                                                  \
    "  return nil\n"                                                           \
    "end\n"                                                                    \
    "local odd = not_a_lock()\n"                                               \
    "if odd then return {0, odd} end\n"

/* ARGV: channel. Administrative release: removes the lock whoever holds
 * it and hands it to the first live waiter. Returns {owner, count, token}
 * of what was removed, or nil if the lock was free. */
static const char force_lua[] =
    PRELUDE NATIVE_SHAPE
    "local h = redis.call('HMGET', KEYS[1], 'owner', 'count', 'token')\n"
    "if not h[1] then return false end\n"
    "redis.call('DEL', KEYS[1])\n"
    "grant_head(ARGV[1])\n"
    "return h\n";

/* Read-only snapshot: {owner or '', count, token, pttl, last fencing
 * token, live waiters}. */
static const char status_lua[] =
    NATIVE_SHAPE
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local h = redis.call('HMGET', KEYS[1], 'owner', 'count', 'token')\n"
    "local waiting = 0\n"
    "for _, w in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do\n"
    "  local dl = redis.call('ZSCORE', KEYS[4], w)\n"
    "  if dl and tonumber(dl) > now then waiting = waiting + 1 end\n"
    "end\n"
    "return {h[1] or '', h[2] or '0', h[3] or '0',\n"
    "        redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0',\n"
    "        waiting}\n";

/* Redlock's second round. KEYS: lock, fence. ARGV: owner, nonce, token.
 * If the hold that acquisition (nonce) took is still there, it gets the
 * token chosen over the nodes, and the counter is raised to at least that
 * token, so that later tokens from this node are greater. 1 if done, 0 if
 * the hold is gone. */
static const char retoken_lua[] =
    "local h = redis.call('HMGET', KEYS[1], 'owner', 'attempt')\n"
    "if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return 0 end\n"
    "redis.call('HSET', KEYS[1], 'token', ARGV[3])\n"
    "local f = tonumber(redis.call('GET', KEYS[2]) or '0')\n"
    "if f < tonumber(ARGV[3]) then redis.call('SET', KEYS[2], ARGV[3]) end\n"
    "return 1\n";

/*
 * The token layout (RLOCK_LAYOUT_TOKEN), shared with other libraries: the
 * lock is the string key KEYS[1] (the name itself), set with SET NX PX to
 * "<owner>:<token>", released by compare-and-delete and extended by
 * compare-and-pexpire, as redis-py, node-redlock and redsync do. KEYS[2]
 * is a fencing counter only rlock uses. ARGV[1] is the owner, ARGV[2] the
 * token (or the lease, for acquire).
 */
static const char tk_acquire_lua[] =
    PRELUDE
    "if redis.call('EXISTS', KEYS[1]) == 1 then\n"
    "  return {0, redis.call('PTTL', KEYS[1])}\n"
    "end\n"
    "local token = next_token()\n"
    "redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'NX', 'PX', "
    "ARGV[2])\n"
    "return {1, token, 1}\n";

static const char tk_release_lua[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] .. ':' .. ARGV[2] then\n"
    "  return -1\n"
    "end\n"
    "redis.call('DEL', KEYS[1])\n"
    "return 0\n";

/* ARGV: owner, token, lease_ms. */
static const char tk_extend_lua[] =
    "if redis.call('GET', KEYS[1]) ~= ARGV[1] .. ':' .. ARGV[2] then\n"
    "  return 0\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
    "return 1\n";

/* The watchdog's batch, as renew's: (owner, token, lease_ms) per key. */
static const char tk_renew_lua[] = RENEW_LOOP(
    "  if redis.pcall('GET', key) == ARGV[3 * i - 2] .. ':' .. ARGV[3 * i - 1]"
    " then\n");

/* ARGV: owner. An attempt whose reply was lost is undone: whatever hold
 * this owner has there is that attempt's (the owner does not hold it
 * otherwise). */
static const char tk_cancel_lua[] =
    "local v = redis.call('GET', KEYS[1])\n"
    "if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "end\n"
    "return 1\n";

/*
 * What the token layout's operators' scripts accept as a lock: a string
 * of 8 to 256 bytes of printable ASCII with no space, the shape of every
 * peer's random token (hex, base64, UUIDs) and of rlock's own values. An
 * expiry is not required: redis-py's Lock without a timeout sets none. An
 * empty value, one starting with a NUL byte, text with spaces, a number or
 * a blob are someone's data: {0, what it is} (see NATIVE_SHAPE).
 */
#define TOKEN_SHAPE                                                            \
    "local function not_a_lock()\n"                                            \
    "  local t = redis.call('TYPE', KEYS[1]).ok\n"                             \
    "  if t ~= 'none' and t ~= 'string' then return 'the key is a ' .. t end\n"\
    "  t = redis.call('TYPE', KEYS[2]).ok\n"                                   \
    "  if t ~= 'none' and t ~= 'string' then\n"                                \
    "    return 'its fencing counter is a ' .. t\n"                            \
    "  end\n"                                                                  \
    "  local v = redis.call('GET', KEYS[1])\n"                                 \
    "  if not v then return nil end\n"                                         \
    "  if #v == 0 then return 'the key holds an empty string' end\n"          \
    "  if string.byte(v, 1) == 0 then\n"                                       \
    "    return 'the key holds a value starting with a NUL byte'\n"            \
    "  end\n"                                                                  \
    "  if #v < 8 or #v > 256 or string.find(v, '[^!-~]') then\n"               \
    "    return 'the key holds a value no lock token has'\n"                   \
    "  end\n"                                                                  \
    "  return nil\n"                                                           \
    "end\n"                                                                    \
    "local odd = not_a_lock()\n"                                               \
    "if odd then return {0, odd} end\n"

/* {value or '', pttl, last fencing token}. */
static const char tk_status_lua[] =
    TOKEN_SHAPE
    "return {redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1]),"
    " redis.call('GET', KEYS[2]) or '0'}\n";

/* Deletes the lock whoever holds it; returns the value it had, or nil. */
static const char tk_force_lua[] =
    TOKEN_SHAPE
    "local v = redis.call('GET', KEYS[1])\n"
    "if v then redis.call('DEL', KEYS[1]) end\n"
    "return v\n";

/*
 * The Redisson layout (RLOCK_LAYOUT_REDISSON), shared with Redisson's
 * RLock: KEYS[1] is the lock, a hash (the name itself) whose owner field,
 * "<client UUID>:<thread>", holds the hold count (rlock adds its holder's
 * identity in a second field, see the acquire script); KEYS[2] is
 * RFencedLock's token counter. The final release deletes the hash and
 * publishes "0" on the channel Redisson's waiters listen on. The owner is
 * the whole proof of ownership, as in Redisson: Redis keeps no token with
 * the hold. Counts are set, not added, like rlock's own (only the owner
 * changes its field), so a request retried after a lost reply does not
 * count twice; Redisson's own scripts add to the same field.
 *
 * Redisson subscribes with SUBSCRIBE, or on a Redis 7 cluster in its
 * sharded mode with SSUBSCRIBE; a release publishes both ways, so its
 * waiters hear it either way (SPUBLISH under pcall: Redis 6 has none). The
 * channel has the lock's hash tag, so both stay in the script's slot.
 *
 * Acquire. ARGV: owner, lease_ms, the count held (0: a fresh acquisition),
 * the token held, the holder's "host/pid" (kept in the field
 * "rlock-holder" for operators; Redisson's scripts never look at fields
 * other than their own, and the final release deletes it with the hash). A fresh acquisition that finds its own field there
 * takes it afresh: an attempt of this owner whose reply was lost made it.
 * Returns as the acquire script.
 */
#define RS_PUBLISH(channel)                                                    \
    "redis.call('PUBLISH', " channel ", '0')\n"                                \
    "redis.pcall('SPUBLISH', " channel ", '0')\n"

static const char rs_acquire_lua[] =
    PRELUDE
    "local owner, held = ARGV[1], tonumber(ARGV[3])\n"
    "local mine = redis.call('HEXISTS', KEYS[1], owner) == 1\n"
    "if held > 0 then\n"
    "  if not mine then return {-1} end\n"
    "  redis.call('HSET', KEYS[1], owner, held + 1)\n"
    "  redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "  return {1, ARGV[4], held + 1}\n"
    "end\n"
    "if not mine and redis.call('EXISTS', KEYS[1]) == 1 then\n"
    "  return {0, redis.call('PTTL', KEYS[1])}\n"
    "end\n"
    "local token = next_token()\n"
    "redis.call('HSET', KEYS[1], owner, 1, 'rlock-holder', ARGV[5])\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
    "return {1, token, 1}\n";

/* ARGV: owner, token (unused), channel, count held. As the release
 * script: the count left, or -1 if the owner's field is not there. */
static const char rs_release_lua[] =
    "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end\n"
    "local n = tonumber(ARGV[4]) - 1\n"
    "if n > 0 then\n"
    "  redis.call('HSET', KEYS[1], ARGV[1], n)\n"
    "  return n\n"
    "end\n"
    "redis.call('DEL', KEYS[1])\n" RS_PUBLISH("ARGV[3]") "return 0\n";

/* ARGV: owner, token (unused), lease_ms. */
static const char rs_extend_lua[] =
    "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
    "return 1\n";

/* The watchdog's batch, as renew's: (owner, token, lease_ms) per key. */
static const char rs_renew_lua[] = RENEW_LOOP(
    "  if redis.pcall('HEXISTS', key, ARGV[3 * i - 2]) == 1 then\n");

/* ARGV: owner, channel. An attempt whose reply was lost is undone: the
 * owner's field there is that attempt's; its waiters are told. */
static const char rs_cancel_lua[] =
    "if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then\n"
    "  redis.call('DEL', KEYS[1])\n"
    "  " RS_PUBLISH("ARGV[2]") "end\n"
    "return 1\n";

/*
 * What the Redisson layout's operators' scripts accept as a lock: a hash
 * with an expiry (Redisson always sets one, its watchdog renews it) whose
 * one owner field "<id>:<thread>" holds a count of at least 1, beside at
 * most rlock's "rlock-holder" field. Redisson's other objects (a
 * read-write lock's "mode", a semaphore's string) are refused, as anything
 * else is (see NATIVE_SHAPE). Sets owner, count and who (the holder's
 * "host/pid" if rlock took it, else '').
 */
#define REDISSON_SHAPE                                                         \
    "local owner, count, who = nil, nil, ''\n"                                 \
    "local function not_a_lock()\n"                                            \
    "  local t = redis.call('TYPE', KEYS[1]).ok\n"                             \
    "  if t ~= 'none' and t ~= 'hash' then return 'the key is a ' .. t end\n"  \
    "  t = redis.call('TYPE', KEYS[2]).ok\n"                                   \
    "  if t ~= 'none' and t ~= 'string' then\n"                                \
    "    return 'its fencing counter is a ' .. t\n"                            \
    "  end\n"                                                                  \
    "  if redis.call('EXISTS', KEYS[1]) == 0 then return nil end\n"            \
    "  local odd = 'the key is a hash with fields no Redisson lock has'\n"     \
    "  if redis.call('HLEN', KEYS[1]) > 2 then return odd end\n"               \
    "  local h = redis.call('HGETALL', KEYS[1])\n"                             \
    "  for i = 1, #h, 2 do\n"                                                  \
    "    if h[i] == 'rlock-holder' then who = h[i + 1]\n"                      \
    "    elseif owner or not string.find(h[i], ':%d+$') or\n"                  \
    "           not string.find(h[i + 1], '^[1-9]%d*$') then return odd\n"      \
    "    else owner, count = h[i], h[i + 1] end\n"                             \
    "  end\n"                                                                  \
    "  if not owner then return odd end\n"                                     \
    "  if redis.call('PTTL', KEYS[1]) < 0 then return 'the key has no expiry'"  \
    " end\n"                                                                   \
    "  return nil\n"                                                           \
    "end\n"                                                                    \
    "local odd = not_a_lock()\n"                                               \
    "if odd then return {0, odd} end\n"

/* As the status script's snapshot, with the holder's identity: {field or
 * '', count, '0', pttl, last fencing token, 0, who}; no token is kept with
 * the hold, and nobody queues. */
static const char rs_status_lua[] =
    REDISSON_SHAPE
    "return {owner or '', count or '0', '0', redis.call('PTTL', KEYS[1]),\n"
    "        redis.call('GET', KEYS[2]) or '0', 0, who}\n";

/* ARGV: channel. Deletes the lock whoever holds it and wakes its waiters,
 * as Redisson's forceUnlock does; returns {field, count, '0', who} or
 * nil. */
static const char rs_force_lua[] =
    REDISSON_SHAPE
    "if not owner then return false end\n"
    "redis.call('DEL', KEYS[1])\n" RS_PUBLISH("ARGV[1]")
    "return {owner, count, '0', who}\n";

static const rlock__script_src scripts[RLOCK__S_COUNT] = {
    [RLOCK__S_ACQUIRE] = {"acquire", acquire_lua},
    [RLOCK__S_RELEASE] = {"release", release_lua},
    [RLOCK__S_EXTEND] = {"extend", extend_lua},
    [RLOCK__S_CANCEL] = {"cancel", cancel_lua},
    [RLOCK__S_RENEW] = {"renew", renew_lua},
    [RLOCK__S_FORCE] = {"force", force_lua},
    [RLOCK__S_STATUS] = {"status", status_lua},
    [RLOCK__S_RETOKEN] = {"retoken", retoken_lua},
    [RLOCK__S_TK_ACQUIRE] = {"token acquire", tk_acquire_lua},
    [RLOCK__S_TK_RELEASE] = {"token release", tk_release_lua},
    [RLOCK__S_TK_EXTEND] = {"token extend", tk_extend_lua},
    [RLOCK__S_TK_RENEW] = {"token renew", tk_renew_lua},
    [RLOCK__S_TK_CANCEL] = {"token cancel", tk_cancel_lua},
    [RLOCK__S_TK_STATUS] = {"token status", tk_status_lua},
    [RLOCK__S_TK_FORCE] = {"token force", tk_force_lua},
    [RLOCK__S_RS_ACQUIRE] = {"redisson acquire", rs_acquire_lua},
    [RLOCK__S_RS_RELEASE] = {"redisson release", rs_release_lua},
    [RLOCK__S_RS_EXTEND] = {"redisson extend", rs_extend_lua},
    [RLOCK__S_RS_RENEW] = {"redisson renew", rs_renew_lua},
    [RLOCK__S_RS_CANCEL] = {"redisson cancel", rs_cancel_lua},
    [RLOCK__S_RS_STATUS] = {"redisson status", rs_status_lua},
    [RLOCK__S_RS_FORCE] = {"redisson force", rs_force_lua},
};

const rlock__script_src *rlock__script(enum rlock__script s)
{
    return &scripts[s];
}
