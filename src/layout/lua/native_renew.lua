-- SPDX-License-Identifier: BSD-3-Clause
-- Renew: the hold is the owner's with that token.
local function owns(key, owner, token)
  local h = redis.pcall('HMGET', key, 'owner', 'token')
  return h[1] == owner and h[2] == token
end
--! include renew_loop.lua
