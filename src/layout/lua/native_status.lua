-- SPDX-License-Identifier: BSD-3-Clause
-- Status: a read-only snapshot, {owner or '', count, token, pttl, last
-- fencing token, live waiters}.
--! include native_shape.lua
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', KEYS[1], 'owner', 'count', 'token')
local waiting = 0
for _, w in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  local dl = redis.call('ZSCORE', KEYS[4], w)
  if dl and tonumber(dl) > now then waiting = waiting + 1 end
end
return {h[1] or '', h[2] or '0', h[3] or '0',
        redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or '0',
        waiting}
