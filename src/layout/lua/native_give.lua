-- SPDX-License-Identifier: BSD-3-Clause
-- The last level of a hold nobody waits behind, shared by the release
-- script and its fast form (included where each begins): GET and DEL and
-- an integer answer. KEYS[1] is the lock; ARGV[1] "<owner> <token> " (how
-- the hold's value starts), ARGV[2] the count the owner holds, absent in
-- the fast form (1). The value's last byte is its waiters flag.
local v = redis.call('GET', KEYS[1])
if not v or string.find(v, ARGV[1], 1, true) ~= 1 then return -1 end
if (ARGV[2] or '1') == '1' and string.byte(v, -1) == 48 then
  redis.call('DEL', KEYS[1])
  return 0
end
