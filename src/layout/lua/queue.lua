-- SPDX-License-Identifier: BSD-3-Clause
-- The queue of rlock's own layout, included by its scripts after
-- fence.lua.
--
-- Keys, always in this order (they share one cluster hash tag):
--   KEYS[1] lock   hash {owner, count, token, attempt}, expires with the lease
--   KEYS[2] fence  fencing token counter, never expires
--   KEYS[3] queue  list of waiting owners, oldest first
--   KEYS[4] qttl   zset waiting owner -> deadline in server milliseconds
--   KEYS[5] qinfo  hash waiting owner -> "lease_ms nonce" for its grant
--
-- Times compared inside a script come from the server's own clock (TIME),
-- so client clocks never matter; only the order and liveness of waiters
-- depend on it, never mutual exclusion.
--
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
-- Publishes on the channel of the waiter's own client: the wake channel,
-- ':', and the client's random id, the part of the owner id before its
-- identity ("@host/pid") and number. A refused PUBLISH (an ACL user
-- without it) must not undo what the script did before it, nor stop what
-- follows: it is returned, as text, for the caller to report.
local function notify(channel, who, msg)
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
local function grant_head(channel)
  if not redis.call('LINDEX', KEYS[3], 0) then return nil end
  local now = now_ms()
  local head, dl = live_head(now)
  if not head then return nil end
  local info = redis.call('HGET', KEYS[5], head) or ''
  local lease, nonce = string.match(info, '^(%d+) (%d+)$')
  dequeue(head)
  local grant = math.min(tonumber(lease) or (dl - now), dl - now)
  nonce = nonce or '0'
  local token = next_token()
  redis.call('HSET', KEYS[1], 'owner', head, 'count', 1,
             'token', token, 'attempt', nonce)
  redis.call('PEXPIRE', KEYS[1], grant)
  return notify(channel, head, head .. ' ' .. token .. ' ' .. nonce ..
                ' ' .. grant)
end
