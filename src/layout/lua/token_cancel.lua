-- SPDX-License-Identifier: BSD-3-Clause
-- Cancel. ARGV: owner (the abandoned acquisition's own: it ends with its
-- nonce). An attempt whose reply was lost is undone: the hold it took, if
-- any, is the one whose value starts with that owner. A later hold of the
-- same owner writes another owner string and is left alone.
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  redis.call('DEL', KEYS[1])
end
return 1
