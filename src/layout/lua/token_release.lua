-- SPDX-License-Identifier: BSD-3-Clause
-- Release. ARGV: owner (this hold's own: it ends with the acquisition's
-- nonce), nonce. 0 if released, -1 if the value is not this hold's
-- (another's lock, or a later hold of the same owner, is left untouched).
local v = redis.call('GET', KEYS[1])
if not v or string.sub(v, 1, #ARGV[1] + 1) ~= ARGV[1] .. ':' then
  return -1
end
redis.call('DEL', KEYS[1])
return 0
