-- SPDX-License-Identifier: BSD-3-Clause
-- Renew: the value is the owner's with that token.
local function renew(key, owner, token, _, lease)
  if redis.pcall('GET', key) ~= owner .. ':' .. token then return 0 end
  redis.call('PEXPIRE', key, lease)
  return 1
end
--! include renew_loop.lua
