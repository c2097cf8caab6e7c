-- SPDX-License-Identifier: BSD-3-Clause
-- Extend. ARGV: owner, token, lease_ms. 1 if extended, 0 if the hold is
-- gone (never recreates the key).
local v = redis.call('GET', KEYS[1])
if v and string.find(v, ARGV[1] .. ' ' .. ARGV[2] .. ' ', 1, true) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0
