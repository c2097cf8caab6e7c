-- SPDX-License-Identifier: BSD-3-Clause
-- Renew: the owner's field is there (no token is kept with the hold).
local function renew(key, owner, _, _, lease)
  if redis.pcall('HEXISTS', key, owner) ~= 1 then return 0 end
  redis.call('PEXPIRE', key, lease)
  return 1
end
--! include renew_loop.lua
