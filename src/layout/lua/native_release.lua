-- SPDX-License-Identifier: BSD-3-Clause
-- Release. ARGV: owner, token, channel, count (what the owner holds
-- before this release). Sets the count to count - 1, so a release retried
-- after a lost reply never releases twice. Returns the remaining count
-- (0: released, and handed to the first live waiter if there is one), or
-- -1 if this owner's hold with this token is not there (expired, deleted,
-- released by the lost first try, or another owner's lock, which is left
-- untouched); {0, error} if it was released but the waiter it was handed
-- to could not be notified.
--! include fence.lua
--! include queue.lua
local h = redis.call('HMGET', KEYS[1], 'owner', 'token')
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return -1 end
local n = tonumber(ARGV[4]) - 1
if n > 0 then
  redis.call('HSET', KEYS[1], 'count', n)
  return n
end
redis.call('DEL', KEYS[1])
local e = grant_head(ARGV[3])
if e then return {0, e} end
return 0
