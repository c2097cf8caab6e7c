-- SPDX-License-Identifier: BSD-3-Clause
-- Extend. KEYS: lock. ARGV: owner, nonce, lease_ms, the token the client
-- holds (0: none drawn). 1 if extended, 0 if the hold is gone (never
-- recreates the key), or has lost the token the client drew (see
-- native_renew.lua).
--! include native_value.lua
local v = redis.call('GET', KEYS[1])
if not v or string.find(v, ARGV[1] .. ' ' .. ARGV[2] .. ' ', 1, true) ~= 1 then
  return 0
end
local o, non, cnt, w, tok, e = parse(v)
if not o or not live(w, e) or (ARGV[4] ~= '0' and tok ~= ARGV[4]) then
  return 0
end
stretch(KEYS[1], o, non, cnt, w, tok, tonumber(ARGV[3]))
return 1
