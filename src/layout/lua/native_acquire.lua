-- SPDX-License-Identifier: BSD-3-Clause
-- Acquire. ARGV: owner, lease_ms, nonce, mode, waiter_ttl_ms, and for a
-- re-entry count and token.
--   mode 'r': re-entry (the client holds it with that token and count);
--   't': try; 'w': wait, that is, join the queue if busy. nonce names this
--   acquisition (all attempts of one wait share it), so that a grant or a
--   hold whose reply was lost can be recognised and undone exactly.
-- Counts are set, not added to: only the owner changes its count, so
-- "count = what I had + 1" is right even when an earlier request whose
-- reply was lost did it already.
-- Returns the token when a fresh acquisition took a free lock nobody
-- waited for (count 1; the client then goes back to the fast form);
-- {1, token, count} when a re-entry or a claim holds it; {0, hint_ms}
-- when busy, hint_ms being how long the holder's lease lasts at most;
-- {-1} when a re-entry finds the hold gone.
--! include native_take.lua
--! include native_lib.lua
local owner, lease, nonce, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local v = redis.call('GET', KEYS[1])
local o, tok, non, cnt, w = parse(v)
if v and not o then
  -- Someone's data under the lock's name: not touched.
  return redis.error_reply('WRONGTYPE the lock key holds a value that is '
                           .. 'not an rlock lock')
end
if mode == 'r' then
  if o ~= owner or tok ~= ARGV[7] then return {-1} end
  local n = tonumber(ARGV[6]) + 1
  redis.call('SET', KEYS[1], value(o, tok, non, n, w), 'PX', lease)
  return {1, tok, n}
end
if o == owner then
  -- Granted to us while our message was on its way (or to an earlier
  -- wait of ours): claim it, counting its lease from this request.
  dequeue(owner)
  redis.call('SET', KEYS[1], value(o, tok, nonce, cnt, queued()), 'PX',
             lease)
  return {1, tok, tonumber(cnt)}
end
-- The clock is read only when a queue is involved.
local now
local function clock()
  if not now then now = now_ms() end
  return now
end
-- Joins the queue, or refreshes this owner's place in it (its deadline,
-- and the lease and nonce a grant is for). The queue's keys outlive the
-- last place by a second, so a queue nobody refreshes goes by itself.
local function enqueue()
  local ttl = tonumber(ARGV[5])
  local e = string.format('%.0f', clock() + ttl) .. ' ' .. lease .. ' ' ..
            nonce
  if redis.call('HSET', KEYS[4], owner, e) == 1 then
    redis.call('RPUSH', KEYS[3], owner)
  end
  for i = 3, 4 do
    if redis.call('PTTL', KEYS[i]) < ttl + 1000 then
      redis.call('PEXPIRE', KEYS[i], ttl + 1000)
    end
  end
end
if v then
  if mode == 'w' then
    enqueue()
    -- The holder's release must look at the queue now.
    if w == '0' then redis.call('SETRANGE', KEYS[1], #v - 1, '1') end
  end
  return {0, redis.call('PTTL', KEYS[1])}
end
local head = live_head(clock())
if head and head ~= owner then
  -- Free, but others queued first (its holder expired, or a release
  -- found nobody alive then): it is theirs. (A notification that fails
  -- is the granted waiter's to notice, by its own timers.)
  if mode == 'w' then enqueue() end
  grant_head()
  return {0, redis.call('PTTL', KEYS[1])}
end
if head then dequeue(owner, true) end
local token = next_token()
redis.call('SET', KEYS[1], value(owner, token, nonce, 1, queued()), 'PX',
           lease)
return {1, token, 1}
