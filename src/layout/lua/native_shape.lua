-- SPDX-License-Identifier: BSD-3-Clause
-- The operators' scripts (status, force) act only on keys shaped as this
-- layout keeps a lock; anything else is someone's data, left untouched:
-- they return {0, what it is} instead. Each key is absent or of its type,
-- and the lock key is a hash of at most rlock's four fields, among them
-- the owner, with an expiry (every hold has a lease).
local function not_a_lock()
  local want = {'hash', 'string', 'list', 'zset', 'hash'}
  local role = {'lock key', 'fencing counter', 'queue key',
                'queue deadline key', 'queue grant key'}
  for i = 1, 5 do
    local t = redis.call('TYPE', KEYS[i]).ok
    if t ~= 'none' and t ~= want[i] then
      return 'its ' .. role[i] .. ' is a ' .. t
    end
  end
  if redis.call('EXISTS', KEYS[1]) == 0 then return nil end
  local n = redis.call('HLEN', KEYS[1])
  local known = {owner = 1, count = 1, token = 1, attempt = 1}
  if n <= 4 then
    for _, f in ipairs(redis.call('HKEYS', KEYS[1])) do
      if not known[f] then n = 5 end
    end
  end
  if n > 4 or redis.call('HEXISTS', KEYS[1], 'owner') == 0 then
    return 'its lock key is a hash with fields no rlock lock has'
  end
  if redis.call('PTTL', KEYS[1]) < 0 then
    return 'its lock key has no expiry'
  end
  return nil
end
local odd = not_a_lock()
if odd then return {0, odd} end
