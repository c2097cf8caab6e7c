-- SPDX-License-Identifier: BSD-3-Clause
-- What the Redisson layout's operators' scripts accept as a lock: a hash
-- with an expiry (Redisson always sets one, its watchdog renews it) whose
-- one owner field "<id>:<number>" holds a count of at least 1, beside at
-- most rlock's "rlock-holder" field. Redisson's other objects (a
-- read-write lock's "mode", a semaphore's string) are refused, as
-- anything else is. Sets owner, count and who (the holder's "host/pid"
-- if rlock took it, else '').
local owner, count, who = nil, nil, ''
local function not_a_lock()
  local t = redis.call('TYPE', KEYS[1]).ok
  if t ~= 'none' and t ~= 'hash' then return 'the key is a ' .. t end
  t = redis.call('TYPE', KEYS[2]).ok
  if t ~= 'none' and t ~= 'string' then
    return 'its fencing counter is a ' .. t
  end
  if redis.call('EXISTS', KEYS[1]) == 0 then return nil end
  local odd = 'the key is a hash with fields no Redisson lock has'
  if redis.call('HLEN', KEYS[1]) > 2 then return odd end
  local h = redis.call('HGETALL', KEYS[1])
  for i = 1, #h, 2 do
    if h[i] == 'rlock-holder' then who = h[i + 1]
    elseif owner or not string.find(h[i], ':%d+$') or
           not string.find(h[i + 1], '^[1-9]%d*$') then return odd
    else owner, count = h[i], h[i + 1] end
  end
  if not owner then return odd end
  if redis.call('PTTL', KEYS[1]) < 0 then return 'the key has no expiry' end
  return nil
end
local odd = not_a_lock()
if odd then return {0, odd} end
