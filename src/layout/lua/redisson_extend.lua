-- SPDX-License-Identifier: BSD-3-Clause
-- Extend. ARGV: owner, token (unused), lease_ms.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
