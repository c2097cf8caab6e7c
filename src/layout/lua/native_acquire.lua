-- SPDX-License-Identifier: BSD-3-Clause
-- Acquire. ARGV: owner, lease_ms, mode, waiter_ttl_ms, channel, nonce,
-- count, token.
--   mode 'r': re-entry (the client holds it with that token and count);
--   't': try; 'w': wait, that is, join the queue if busy. nonce names this
--   acquisition (all attempts of one wait share it), so that a grant or a
--   hold whose reply was lost can be recognised and undone exactly.
-- Counts are set, not added to: only the owner changes its count, so
-- "count = what I had + 1" is right even when an earlier request whose
-- reply was lost did it already.
-- Returns {1, token, count} when held (count > 1: a re-entry); {0, hint_ms}
-- when busy, hint_ms being how long the holder's lease lasts at most; {-1}
-- when a re-entry finds the hold gone.
--! include fence.lua
--! include queue.lua
local owner, lease, mode = ARGV[1], ARGV[2], ARGV[3]
local h = redis.call('HMGET', KEYS[1], 'owner', 'token', 'count')
if mode == 'r' then
  if h[1] ~= owner or h[2] ~= ARGV[8] then return {-1} end
  local n = tonumber(ARGV[7]) + 1
  redis.call('HSET', KEYS[1], 'count', n)
  redis.call('PEXPIRE', KEYS[1], lease)
  return {1, h[2], n}
end
if h[1] == owner then
  -- Granted to us while our message was on its way (or to an earlier
  -- wait of ours): claim it, counting its lease from this request.
  dequeue(owner)
  redis.call('HSET', KEYS[1], 'attempt', ARGV[6])
  redis.call('PEXPIRE', KEYS[1], lease)
  return {1, h[2], tonumber(h[3])}
end
-- The clock is read only when a queue is involved: an uncontended
-- acquisition runs five commands (HMGET LINDEX INCR HSET PEXPIRE).
local now
local function clock()
  if not now then now = now_ms() end
  return now
end
local function enqueue()
  local ttl = tonumber(ARGV[4])
  if redis.call('ZADD', KEYS[4], clock() + ttl, owner) == 1 then
    redis.call('RPUSH', KEYS[3], owner)
  end
  redis.call('HSET', KEYS[5], owner, lease .. ' ' .. ARGV[6])
  for i = 3, 5 do
    if redis.call('PTTL', KEYS[i]) < ttl + 1000 then
      redis.call('PEXPIRE', KEYS[i], ttl + 1000)
    end
  end
end
if h[1] then
  if mode == 'w' then enqueue() end
  return {0, redis.call('PTTL', KEYS[1])}
end
local head = nil
if redis.call('LINDEX', KEYS[3], 0) then head = live_head(clock()) end
if head and head ~= owner then
  -- Free, but others queued first (its holder expired, or a release
  -- found nobody alive then): it is theirs. (A notification that fails
  -- is the granted waiter's to notice, by its own timers.)
  if mode == 'w' then enqueue() end
  grant_head(ARGV[5])
  return {0, redis.call('PTTL', KEYS[1])}
end
if head then dequeue(owner) end
local token = next_token()
redis.call('HSET', KEYS[1], 'owner', owner, 'count', 1, 'token', token,
           'attempt', ARGV[6])
redis.call('PEXPIRE', KEYS[1], lease)
return {1, token, 1}
