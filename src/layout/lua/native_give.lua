-- SPDX-License-Identifier: BSD-3-Clause
-- The last level of a hold nobody waits behind, shared by the release
-- script and its fast form (included where each begins): GET and DEL and
-- an integer answer. KEYS[1] is the lock; ARGV[1] "<owner> <nonce> " (how
-- the hold's value starts), ARGV[2] the count the owner holds, absent in
-- the fast form (1). What follows the start is "<count> <w> ": "1 0 " is
-- the last level with nobody queued.
local v = redis.call('GET', KEYS[1])
if not v or string.find(v, ARGV[1], 1, true) ~= 1 then return -1 end
if (ARGV[2] or '1') == '1' and
   string.sub(v, #ARGV[1] + 1, #ARGV[1] + 4) == '1 0 ' then
  redis.call('DEL', KEYS[1])
  return 0
end
