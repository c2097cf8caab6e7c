-- SPDX-License-Identifier: BSD-3-Clause
-- Renew: the hold is there (the value starts with its owner and nonce)
-- and its lease lasts. Nobody queued (count, "0", token after the start)
-- is a PEXPIRE, the common case, without taking the value apart.
--! include native_value.lua
local function renew(key, owner, nonce, lease)
  local v = redis.pcall('GET', key)
  if type(v) ~= 'string' then return 0 end
  local start = owner .. ' ' .. nonce .. ' '
  if string.find(v, start, 1, true) ~= 1 then return 0 end
  if string.find(v, '^%d+ 0 %d+$', #start + 1) then
    redis.call('PEXPIRE', key, lease)
    return 1
  end
  local o, non, cnt, w, tok, e = parse(v)
  if not o or not live(w, e) then return 0 end
  stretch(key, o, non, cnt, w, tok, tonumber(lease))
  return 1
end
--! include renew_loop.lua
