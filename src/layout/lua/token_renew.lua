-- SPDX-License-Identifier: BSD-3-Clause
-- Renew: the value is the owner's with that token.
local function owns(key, owner, token)
  return redis.pcall('GET', key) == owner .. ':' .. token
end
--! include renew_loop.lua
