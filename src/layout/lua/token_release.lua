-- SPDX-License-Identifier: BSD-3-Clause
-- Release. ARGV: owner, token. 0 if released, -1 if the value is not
-- this hold's (another's lock is left untouched).
if redis.call('GET', KEYS[1]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return -1
end
redis.call('DEL', KEYS[1])
return 0
