-- SPDX-License-Identifier: BSD-3-Clause
-- What rlock's own layout's full scripts share, included after their
-- fast path (the fast paths run before any of this is defined, and so
-- pay nothing for it).
--
-- Keys, always in this order (they share one cluster hash tag):
--   KEYS[1] lock   string (native_value.lua), expires with the lease, or
--                  with the queue while waiters may be queued
--   KEYS[2] fence  fencing token counter, never expires
--   KEYS[3] queue  list of waiting owners, oldest first
--   KEYS[4] qinfo  hash waiting owner -> "<deadline> <lease_ms> <nonce>":
--                  when its place runs out (server milliseconds), and the
--                  lease and acquisition a grant is for
--
-- The wake channel is the lock key's name followed by ":wake" (a channel
-- is not a key: it is derived here, not passed). Times compared inside a
-- script come from the server's own clock (TIME), so client clocks never
-- matter.
--! include native_value.lua
local channel = KEYS[1] .. ':wake'
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
local function live_head(head)
  head = head or redis.call('LINDEX', KEYS[3], 0)
  while head do
    local dl, lease, nonce = entry(head)
    if dl and dl > clock() then return head, dl, lease, nonce end
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
-- How long the holder's lease lasts, in ms.
local function left(w, e)
  if w == '1' then return math.max(e - clock(), 0) end
  return redis.call('PTTL', KEYS[1])
end
-- Writes the lock with a lease of lease ms from now; w '1' keeps the key
-- at least as long as the queue (native_value.lua).
local function put(owner, nonce, count, w, token, lease)
  lease = math.max(tonumber(lease), 1)
  if w == '1' then
    redis.call('SET', KEYS[1], value(owner, nonce, count, '1', token,
                                     clock() + lease),
               'PX', math.max(lease, redis.call('PTTL', KEYS[3])))
  else
    redis.call('SET', KEYS[1], value(owner, nonce, count, '0', token), 'PX',
               lease)
  end
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
-- The lock is free (its key gone, its lease over, or about to be
-- replaced): hand it to the first live waiter. The grant's lease is the
-- waiter's own, but no longer than its place in the queue had left, so a
-- waiter that died holds up others no longer than its place would have.
-- The message tells the waiter its token, the nonce of the wait it
-- granted, and the lease granted. Returns whether it was handed over,
-- the notification's error if that failed, and the lease granted.
local function grant_head()
  local head = redis.call('LPOP', KEYS[3])
  local dl, lease, nonce
  while head do
    dl, lease, nonce = entry(head)
    redis.call('HDEL', KEYS[4], head)
    if dl and dl > clock() then break end
    head = redis.call('LPOP', KEYS[3])
  end
  if not head then return false end
  local grant = math.min(lease or (dl - clock()), dl - clock())
  nonce = nonce or '0'
  local token = next_token()
  put(head, nonce, 1, queued(), token, grant)
  return true, notify(head, head .. ' ' .. token .. ' ' .. nonce .. ' ' ..
                      grant), grant
end
-- The lock is free: to the first live waiter, or away.
local function free_lock()
  local granted, e = grant_head()
  if not granted then redis.call('DEL', KEYS[1]) end
  return granted, e
end
