-- SPDX-License-Identifier: BSD-3-Clause
-- Cancel. ARGV: owner. An attempt whose reply was lost is undone: whatever
-- hold this owner has there is that attempt's (the owner does not hold it
-- otherwise).
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  redis.call('DEL', KEYS[1])
end
return 1
