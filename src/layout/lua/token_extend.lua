-- SPDX-License-Identifier: BSD-3-Clause
-- Extend. ARGV: owner (the hold's own), token, lease_ms. 1 if extended, 0
-- if gone.
if redis.call('GET', KEYS[1]) ~= ARGV[1] .. ':' .. ARGV[2] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
