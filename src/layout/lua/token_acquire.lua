-- SPDX-License-Identifier: BSD-3-Clause
-- The token layout (RLOCK_LAYOUT_TOKEN), shared with other libraries: the
-- lock is the string key KEYS[1] (the name itself), set with SET NX PX to
-- "<owner>:<token>", released by compare-and-delete and extended by
-- compare-and-pexpire, as redis-py, node-redlock and redsync do. KEYS[2]
-- is a fencing counter only rlock uses.
--
-- Acquire. ARGV: owner, lease_ms. Returns as rlock's own acquire script.
--! include fence.lua
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('PTTL', KEYS[1])}
end
local token = next_token()
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. token, 'NX', 'PX', ARGV[2])
return {1, token, 1}
