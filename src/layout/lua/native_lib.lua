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
--   KEYS[4] qinfo  hash waiting owner -> "<deadline> <lease_ms> <nonce>":
--                  when its place runs out (server milliseconds), and the
--                  lease and acquisition a grant is for
--
-- The wake channel is the lock key's name followed by ":wake" (a channel
-- is not a key: it is derived here, not passed). Times compared inside a
-- script come from the server's own clock (TIME), so client clocks never
-- matter; only the order and liveness of waiters depend on it, never
-- mutual exclusion.
--
-- fence.lua: replicate_commands(), now_ms() and next_token(), which
-- every layout's acquisition shares (KEYS[2] is the counter here too).
--! include fence.lua
local channel = KEYS[1] .. ':wake'
-- The lock's value, and its fields.
local function value(owner, token, nonce, count, w)
  return owner .. ' ' .. token .. ' ' .. nonce .. ' ' .. count .. ' ' .. w
end
local function parse(v)
  return string.match(v or '', '^(%S+) (%d+) (%d+) (%d+) ([01])$')
end
-- A waiter's entry: deadline, lease_ms, nonce (numbers; nil if absent).
local function entry(who)
  local e = redis.call('HGET', KEYS[4], who)
  local dl, lease, nonce = string.match(e or '', '^(%d+) (%d+) (%d+)$')
  return tonumber(dl), tonumber(lease), nonce
end
-- Takes a waiter out of the queue (the head: LPOP, not a scan).
local function dequeue(who, head)
  if head then
    redis.call('LPOP', KEYS[3])
  else
    redis.call('LREM', KEYS[3], 0, who)
  end
  redis.call('HDEL', KEYS[4], who)
end
-- Drops waiters at the head whose place expired; returns the first live
-- one, its deadline, lease and nonce. head: the head, if read already.
local function live_head(now, head)
  head = head or redis.call('LINDEX', KEYS[3], 0)
  while head do
    local dl, lease, nonce = entry(head)
    if dl and dl > now then return head, dl, lease, nonce end
    dequeue(head, true)
    head = redis.call('LINDEX', KEYS[3], 0)
  end
  return nil
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
-- The lock is free (its key gone or about to be replaced): hand it to the
-- first live waiter. The grant's lease is the waiter's own, but no longer
-- than its place in the queue had left, so a waiter that died holds up
-- others no longer than its place would have. The message tells the
-- waiter its token, the nonce of the wait it granted, and the lease
-- granted. Returns whether it was handed over, and the notification's
-- error if that failed.
local function grant_head()
  local head = redis.call('LINDEX', KEYS[3], 0)
  if not head then return false end
  local now = now_ms()
  local dl, lease, nonce
  head, dl, lease, nonce = live_head(now, head)
  if not head then return false end
  dequeue(head, true)
  local grant = math.min(lease or (dl - now), dl - now)
  nonce = nonce or '0'
  local token = next_token()
  redis.call('SET', KEYS[1], value(head, token, nonce, 1, queued()), 'PX',
             grant)
  return true, notify(head, head .. ' ' .. token .. ' ' .. nonce .. ' ' ..
                      grant)
end
