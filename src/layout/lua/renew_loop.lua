-- SPDX-License-Identifier: BSD-3-Clause
-- The watchdog's batch, the same for every layout: KEYS are lock keys,
-- ARGV holds (owner, id, token, lease_ms) for each, id being what the
-- layout knows a hold by beside its owner (rlock's own: the nonce; the
-- token layout: the token) and token the one the client holds (0: none
-- drawn). Returns a 1 (renewed) or 0 (gone) per key. The layout's script
-- defines renew(key, owner, id, token, lease) first; it reads
-- with redis.pcall, so that a key of another type under one lock's name
-- (someone's data put there after the hold was lost) is that hold gone,
-- not an error that fails the whole batch and lets every other hold of
-- the client expire.
local out = {}
for i, key in ipairs(KEYS) do
  out[i] = renew(key, ARGV[4 * i - 3], ARGV[4 * i - 2], ARGV[4 * i - 1],
                 ARGV[4 * i])
end
return out
