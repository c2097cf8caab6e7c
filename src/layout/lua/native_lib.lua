-- SPDX-License-Identifier: BSD-3-Clause
-- What rlock's own layout's scripts share, included after their fast path
-- (the fast paths run before any of this is defined, and so pay nothing
-- for it).
--
-- Keys, always in this order (they share one cluster hash tag):
--   KEYS[1] lock   string "<owner> <token> <nonce> <count> <w>", expires
--                  with the lease; w is 1 while waiters may be queued
--                  behind the holder, so that a release without waiters
--                  need not look at the queue
--   KEYS[2] fence  fencing token counter, never expires
--   KEYS[3] queue  list of waiting owners, oldest first
--   KEYS[4] qttl   zset waiting owner -> deadline in server milliseconds
--   KEYS[5] qinfo  hash waiting owner -> "lease_ms nonce" for its grant
--
-- The wake channel is the lock key's name followed by ":wake" (a channel
-- is not a key: it is derived here, not passed). Times compared inside a
-- script come from the server's own clock (TIME),
-- so client clocks never matter; only the order and liveness of waiters
-- depend on it, never mutual exclusion.
--
-- replicate_commands() lets Redis 5 and 6 accept writes after TIME; Redis
-- 7 always replicates effects.
if redis.replicate_commands then redis.replicate_commands() end
local channel = KEYS[1] .. ':wake'
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The lock's value, and its fields.
local function value(owner, token, nonce, count, w)
  return owner .. ' ' .. token .. ' ' .. nonce .. ' ' .. count .. ' ' .. w
end
local function parse(v)
  return string.match(v or '', '^(%S+) (%d+) (%d+) (%d+) ([01])$')
end
-- The next fencing token, as the exact decimal text. A missing counter (a
-- new name, a Redis that restarted without persistence, an evicted or
-- deleted key) starts at the server's clock in microseconds: greater than
-- every token handed out before, unless that clock stepped back or tokens
-- were drawn faster than one per microsecond on average. (%.0f, not
-- tostring: Lua would print 16 digits as 1.7e+15; exact below 2^53.)
local function next_token()
  local n = redis.call('INCR', KEYS[2])
  if n ~= 1 then return string.format('%.0f', n) end
  local t = redis.call('TIME')
  local seed = t[1] .. string.format('%06d', tonumber(t[2]))
  redis.call('SET', KEYS[2], seed)
  return seed
end
-- Takes a waiter out of the queue.
local function dequeue(who)
  redis.call('LREM', KEYS[3], 0, who)
  redis.call('ZREM', KEYS[4], who)
  redis.call('HDEL', KEYS[5], who)
end
-- Drops waiters at the head whose place expired; returns the first live
-- one and its deadline.
local function live_head(now)
  while true do
    local head = redis.call('LINDEX', KEYS[3], 0)
    if not head then return nil end
    local dl = redis.call('ZSCORE', KEYS[4], head)
    if dl and tonumber(dl) > now then return head, tonumber(dl) end
    dequeue(head)
  end
end
-- Whether anybody is queued (the holder's waiters flag).
local function queued()
  if redis.call('EXISTS', KEYS[3]) == 1 then return '1' end
  return '0'
end
-- Publishes on the channel of the waiter's own client: the wake channel,
-- ':', and the client's random id, the part of the owner id before its
-- identity ("@host/pid") and number. A refused PUBLISH (an ACL user
-- without it) must not undo what the script did before it, nor stop what
-- follows: it is returned, as text, for the caller to report.
local function notify(who, msg)
  local client = string.match(who, '^[^:@]*')
  local r = redis.pcall('PUBLISH', channel .. ':' .. client, msg)
  if type(r) == 'table' and r.err then return r.err end
  return nil
end
-- The lock is free: hand it to the first live waiter. The grant's lease
-- is the waiter's own, but no longer than its place in the queue had
-- left, so a waiter that died holds up others no longer than its place
-- would have. The message tells the waiter its token, the nonce of the
-- wait it granted, and the lease granted. Returns the notification's
-- error, if it failed.
local function grant_head()
  if redis.call('EXISTS', KEYS[3]) == 0 then return nil end
  local now = now_ms()
  local head, dl = live_head(now)
  if not head then return nil end
  local info = redis.call('HGET', KEYS[5], head) or ''
  local lease, nonce = string.match(info, '^(%d+) (%d+)$')
  dequeue(head)
  local grant = math.min(tonumber(lease) or (dl - now), dl - now)
  nonce = nonce or '0'
  local token = next_token()
  redis.call('SET', KEYS[1], value(head, token, nonce, 1, queued()), 'PX',
             grant)
  return notify(head, head .. ' ' .. token .. ' ' .. nonce ..
                ' ' .. grant)
end
