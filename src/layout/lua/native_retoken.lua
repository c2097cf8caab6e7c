-- SPDX-License-Identifier: BSD-3-Clause
-- Redlock's second round. KEYS: lock, fence. ARGV: owner, nonce, token.
-- If the hold that acquisition (nonce) took is still there, it gets the
-- token chosen over the nodes, and the counter is raised to at least that
-- token, so that later tokens from this node are greater. 1 if done, 0 if
-- the hold is gone.
--! include native_value.lua
local o, non, cnt, w, _, e = parse(redis.call('GET', KEYS[1]))
if o ~= ARGV[1] or non ~= ARGV[2] or not live(w, e) then return 0 end
redis.call('SET', KEYS[1], value(o, non, cnt, w, ARGV[3], e), 'KEEPTTL')
local f = tonumber(redis.call('GET', KEYS[2]) or '0')
if f < tonumber(ARGV[3]) then redis.call('SET', KEYS[2], ARGV[3]) end
return 1
