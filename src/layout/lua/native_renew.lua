-- SPDX-License-Identifier: BSD-3-Clause
-- Renew: the hold is there (the value starts with its owner and nonce),
-- its lease lasts, and its token is the one the client holds, if it
-- holds one: a token the client drew that Redis no longer has (a
-- failover lost the write that drew it, not the hold) would be drawn
-- again for the next holder, so the hold is as good as gone. Nobody
-- queued (count, "0", token after the start) is a PEXPIRE, the common
-- case, without taking the value apart.
--! include native_value.lua
local function renew(key, owner, nonce, token, lease)
  local v = redis.pcall('GET', key)
  if type(v) ~= 'string' then return 0 end
  local start = owner .. ' ' .. nonce .. ' '
  if string.find(v, start, 1, true) ~= 1 then return 0 end
  local t = string.match(v, '^%d+ 0 (%d+)$', #start + 1)
  if t then
    if token ~= '0' and t ~= token then return 0 end
    redis.call('PEXPIRE', key, lease)
    return 1
  end
  local o, non, cnt, w, tok, e = parse(v)
  if not o or not live(w, e) or (token ~= '0' and tok ~= token) then
    return 0
  end
  stretch(key, o, non, cnt, w, tok, tonumber(lease))
  return 1
end
--! include renew_loop.lua
