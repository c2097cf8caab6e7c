-- SPDX-License-Identifier: BSD-3-Clause
-- Renew: the owner's field is there (no token is kept with the hold).
local function owns(key, owner, token)
  return redis.pcall('HEXISTS', key, owner) == 1
end
--! include renew_loop.lua
