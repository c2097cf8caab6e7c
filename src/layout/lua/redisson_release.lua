-- SPDX-License-Identifier: BSD-3-Clause
-- Release. ARGV: owner, channel, count held. As rlock's own release
-- script: the count left, -1 if the owner's field is not there, {0,
-- error} if released but the message could not be published.
--! include redisson_publish.lua
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end
local n = tonumber(ARGV[3]) - 1
if n > 0 then
  redis.call('HSET', KEYS[1], ARGV[1], n)
  return n
end
redis.call('DEL', KEYS[1])
local e = publish(ARGV[2])
if e then return {0, e} end
return 0
