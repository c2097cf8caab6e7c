-- SPDX-License-Identifier: BSD-3-Clause
-- The watchdog's batch, the same for every layout: KEYS are lock keys,
-- ARGV holds (owner, token, lease_ms) for each. Returns a 1 (renewed) or 0
-- (gone) per key. The layout's script defines owns(key, owner, token)
-- first; it reads with redis.pcall, so that a key of another type under
-- one lock's name (someone's data put there after the hold was lost) is
-- that hold gone, not an error that fails the whole batch and lets every
-- other hold of the client expire.
local out = {}
for i, key in ipairs(KEYS) do
  if owns(key, ARGV[3 * i - 2], ARGV[3 * i - 1]) then
    redis.call('PEXPIRE', key, ARGV[3 * i])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
