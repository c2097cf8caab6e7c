-- SPDX-License-Identifier: BSD-3-Clause
-- Status: a read-only snapshot, {owner or '', count, token, lease left in
-- ms, last fencing token, live waiters}. A holder whose lease ended while
-- waiters were queued (its key kept for them) holds nothing.
--! include native_value.lua
--! include native_shape.lua
local o, _, cnt, w, tok, e = parse(redis.call('GET', KEYS[1]))
local pttl = redis.call('PTTL', KEYS[1])
if o and w == '1' then pttl = e - clock() end
if o and pttl <= 0 then o, cnt, tok, pttl = nil, nil, nil, -2 end
local waiting = 0
for _, who in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  local dl = string.match(redis.call('HGET', KEYS[4], who) or '', '^(%d+) ')
  if dl and tonumber(dl) > clock() then waiting = waiting + 1 end
end
return {o or '', cnt or '0', tok or '0', pttl,
        redis.call('GET', KEYS[2]) or '0', waiting}
