-- SPDX-License-Identifier: BSD-3-Clause
-- The Redisson layout (RLOCK_LAYOUT_REDISSON), shared with Redisson's
-- RLock: KEYS[1] is the lock, a hash (the name itself) whose owner field,
-- "<client UUID>:<number>", holds the hold count; KEYS[2] is
-- RFencedLock's token counter. The final release deletes the hash and
-- publishes "0" on the channel Redisson's waiters listen on. The owner is
-- the whole proof of ownership, as in Redisson: Redis keeps no token with
-- the hold. Counts are set, not added, like rlock's own (only the owner
-- changes its field), so a request retried after a lost reply does not
-- count twice; Redisson's own scripts add to the same field.
--
-- Acquire. ARGV: owner, lease_ms, the count held (0: a fresh
-- acquisition), the token held, the holder's "host/pid" (kept in the
-- field "rlock-holder" for operators; Redisson's scripts never look at
-- fields other than their own, and the final release deletes it with the
-- hash). A fresh acquisition that finds its own field there takes it
-- afresh: an attempt of this owner whose reply was lost made it. Returns
-- as rlock's own acquire script.
--! include fence.lua
local owner, held = ARGV[1], tonumber(ARGV[3])
local mine = redis.call('HEXISTS', KEYS[1], owner) == 1
if held > 0 then
  if not mine then return {-1} end
  redis.call('HSET', KEYS[1], owner, held + 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, ARGV[4], held + 1}
end
if not mine and redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
local token = next_token()
redis.call('HSET', KEYS[1], owner, 1, 'rlock-holder', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, token, 1}
