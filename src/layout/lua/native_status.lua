-- SPDX-License-Identifier: BSD-3-Clause
-- Status: a read-only snapshot, {owner or '', count, token, pttl, last
-- fencing token, live waiters}.
local function parse(v)
  return string.match(v or '', '^(%S+) (%d+) (%d+) (%d+) ([01])$')
end
--! include native_shape.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local o, tok, _, cnt = parse(redis.call('GET', KEYS[1]))
local waiting = 0
for _, w in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  local dl = string.match(redis.call('HGET', KEYS[4], w) or '', '^(%d+) ')
  if dl and tonumber(dl) > now then waiting = waiting + 1 end
end
return {o or '', cnt or '0', tok or '0',
        redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0',
        waiting}
