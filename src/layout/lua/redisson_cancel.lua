-- SPDX-License-Identifier: BSD-3-Clause
-- Cancel. ARGV: owner, channel. An attempt whose reply was lost is
-- undone: the owner's field there is that attempt's; its waiters are
-- told.
--! include redisson_publish.lua
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  redis.call('DEL', KEYS[1])
  publish(ARGV[2])
end
return 1
