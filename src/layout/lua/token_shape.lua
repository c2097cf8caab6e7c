-- SPDX-License-Identifier: BSD-3-Clause
-- What the token layout's operators' scripts accept as a lock: a string
-- of 8 to 256 bytes of printable ASCII with no space, the shape of every
-- peer's random token (hex, base64, UUIDs) and of rlock's own values. An
-- expiry is not required: redis-py's Lock without a timeout sets none. An
-- empty value, one starting with a NUL byte, text with spaces, a number or
-- a blob are someone's data: {0, what it is}.
local function not_a_lock()
  local t = redis.call('TYPE', KEYS[1]).ok
  if t ~= 'none' and t ~= 'string' then return 'the key is a ' .. t end
  t = redis.call('TYPE', KEYS[2]).ok
  if t ~= 'none' and t ~= 'string' then
    return 'its fencing counter is a ' .. t
  end
  local v = redis.call('GET', KEYS[1])
  if not v then return nil end
  if #v == 0 then return 'the key holds an empty string' end
  if string.byte(v, 1) == 0 then
    return 'the key holds a value starting with a NUL byte'
  end
  if #v < 8 or #v > 256 or string.find(v, '[^!-~]') then
    return 'the key holds a value no lock token has'
  end
  return nil
end
local odd = not_a_lock()
if odd then return {0, odd} end
