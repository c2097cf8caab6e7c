-- SPDX-License-Identifier: BSD-3-Clause
-- Extend. ARGV: owner, token, lease_ms. 1 if extended, 0 if the hold is
-- gone (never recreates the key).
local h = redis.call('HMGET', KEYS[1], 'owner', 'token')
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
