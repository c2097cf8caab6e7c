-- SPDX-License-Identifier: BSD-3-Clause
-- Renew: the value is the hold's (its own owner string) with that token.
local function renew(key, owner, _, token, lease)
  if redis.pcall('GET', key) ~= owner .. ':' .. token then return 0 end
  redis.call('PEXPIRE', key, lease)
  return 1
end
--! include renew_loop.lua
