-- SPDX-License-Identifier: BSD-3-Clause
-- Redlock's second round. KEYS: lock, fence. ARGV: owner, nonce, token.
-- If the hold that acquisition (nonce) took is still there, it gets the
-- token chosen over the nodes, and the counter is raised to at least that
-- token, so that later tokens from this node are greater. 1 if done, 0 if
-- the hold is gone.
local h = redis.call('HMGET', KEYS[1], 'owner', 'attempt')
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], 'token', ARGV[3])
local f = tonumber(redis.call('GET', KEYS[2]) or '0')
if f < tonumber(ARGV[3]) then redis.call('SET', KEYS[2], ARGV[3]) end
return 1
