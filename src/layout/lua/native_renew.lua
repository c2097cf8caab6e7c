-- SPDX-License-Identifier: BSD-3-Clause
-- Renew: the hold is the owner's with that token (the value starts with
-- them).
local function owns(key, owner, token)
  local v = redis.pcall('GET', key)
  return type(v) == 'string' and
         string.find(v, owner .. ' ' .. token .. ' ', 1, true) == 1
end
--! include renew_loop.lua
