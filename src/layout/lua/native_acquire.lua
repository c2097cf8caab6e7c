-- SPDX-License-Identifier: BSD-3-Clause
-- Acquire. ARGV: owner, lease_ms, nonce, mode, waiter_ttl_ms, and for a
-- re-entry the count held.
--   mode 'r': re-entry (the client holds it, taken by acquisition nonce,
--   with that count); 't': try; 'w': wait, that is, join the queue if
--   busy. nonce names this acquisition (all attempts of one wait share
--   it), so that a grant or a hold whose reply was lost can be recognised
--   and undone exactly.
-- Counts are set, not added to: only the owner changes its count, so
-- "count = what I had + 1" is right even when an earlier request whose
-- reply was lost did it already.
-- Returns the token when a fresh acquisition took a free lock nobody
-- waited for (count 1; the client then goes back to the fast form);
-- {1, token, count} when a re-entry or a claim holds it (token "0" if
-- none was drawn yet); {0, hint_ms} when busy, hint_ms being how long the
-- holder's lease lasts at most, and {0, hint_ms, n} when the holder's
-- owner id says its client lists n nodes and the caller's another number
-- (Redlock, below); {-1} when a re-entry finds the hold gone.
--! include native_take.lua
--! include native_lib.lua
local owner, lease, nonce, mode = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local v = redis.call('GET', KEYS[1])
local o, non, cnt, w, tok, e = parse(v)
if v and not o then
  -- Someone's data under the lock's name: not touched.
  return redis.error_reply('WRONGTYPE the lock key holds a value that is '
                           .. 'not an rlock lock')
end
local held = o and live(w, e)
if mode == 'r' then
  if not held or o ~= owner or non ~= nonce then return {-1} end
  local n = tonumber(ARGV[6]) + 1
  put(o, non, n, w == '1' and queued() or '0', tok, lease)
  return {1, tok, n}
end
if held and o == owner and non == nonce then
  -- Granted to this acquisition while our message was on its way (or
  -- taken by an earlier attempt of it whose answer was lost): claim it,
  -- counting its lease from this request. The client holds none of it, so
  -- the count starts again at 1 (levels it counted before are gone to
  -- it). A hold of this owner under another nonce is another
  -- acquisition's: the owner's current hold, which a late attempt of an
  -- earlier acquisition must not take over (its undo would then free it
  -- under its holder), or one its client counted lost and forgot, which
  -- runs out by itself. It is busy to this attempt, as any other hold.
  dequeue(owner)
  put(o, nonce, 1, queued(), tok, lease)
  return {1, tok, 1}
end
-- Joins the queue, or refreshes this owner's place in it (its deadline,
-- and the lease and nonce a grant is for). The queue's keys outlive the
-- last place by at least a second, so a queue nobody refreshes goes by
-- itself; when they must be kept longer they are kept a waiter_ttl more
-- than that, so that a stream of waiters extends them about once per
-- waiter_ttl, not at every join. Returns their new time to live if it
-- was extended.
local function enqueue()
  local ttl = tonumber(ARGV[5])
  local entry = string.format('%.0f', clock() + ttl) .. ' ' .. lease .. ' ' ..
                nonce
  if redis.call('HSET', KEYS[4], owner, entry) == 1 then
    redis.call('RPUSH', KEYS[3], owner)
  end
  local keep, grown = ttl + 1000
  for i = 3, 4 do
    if redis.call('PTTL', KEYS[i]) < keep then
      grown = keep + ttl
      redis.call('PEXPIRE', KEYS[i], grown)
    end
  end
  return grown
end
if held then
  local ms = left(w, e)
  -- A Redlock client ends its owner id with the length of its node list
  -- ("#nodes=N"). Majorities of lists of different lengths need not share
  -- a node, so the holder's count goes back with the busy answer for the
  -- caller to refuse its attempt. (Owner ids without it, a single
  -- server's or an older client's, are not compared.)
  local mine = string.match(owner, '#nodes=(%d+)$')
  local theirs = mine and string.match(o, '#nodes=(%d+)$')
  if theirs and theirs ~= mine then return {0, ms, tonumber(theirs)} end
  if mode == 'w' then
    -- The holder's release must look at the queue now, and the lock key
    -- must last as long as the queue: the lease goes into the value
    -- (already there if others are queued: then only the key's life may
    -- have to grow with the queue's).
    local grown = enqueue()
    if w == '0' then
      put(o, non, cnt, '1', tok, ms)
    elseif grown and redis.call('PTTL', KEYS[1]) < grown then
      redis.call('PEXPIRE', KEYS[1], grown)
    end
  end
  return {0, ms}
end
-- Free: no key, or a lease that ended while waiters were queued.
local head = live_head()
if head and head ~= owner then
  -- Others queued first (its holder expired, or a release found nobody
  -- alive then): it is theirs. (A notification that fails is the
  -- granted waiter's to notice, by its own timers.)
  if mode == 'w' then enqueue() end
  local _, _, ms = grant_head()
  return {0, ms}
end
if head then dequeue(owner, true) end
local token = next_token()
put(owner, nonce, 1, queued(), token, lease)
return {1, token, 1}
