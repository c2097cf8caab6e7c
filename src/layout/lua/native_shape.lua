-- SPDX-License-Identifier: BSD-3-Clause
-- The operators' scripts (status, force) act only on keys shaped as this
-- layout keeps a lock; anything else is someone's data, left untouched:
-- they return {0, what it is} instead. Each key is absent or of its type,
-- and the lock key is a string of the form native_value.lua describes,
-- with an expiry (every hold has a lease). parse() must be defined.
local function not_a_lock()
  local want = {'string', 'string', 'list', 'hash'}
  local role = {'lock key', 'fencing counter', 'queue key',
                'queue entries key'}
  for i = 1, 4 do
    local t = redis.call('TYPE', KEYS[i]).ok
    if t ~= 'none' and t ~= want[i] then
      return 'its ' .. role[i] .. ' is a ' .. t
    end
  end
  local v = redis.call('GET', KEYS[1])
  if not v then return nil end
  if not parse(v) then
    return 'its lock key holds a value no rlock lock has'
  end
  if redis.call('PTTL', KEYS[1]) < 0 then
    return 'its lock key has no expiry'
  end
  return nil
end
local odd = not_a_lock()
if odd then return {0, odd} end
