-- SPDX-License-Identifier: BSD-3-Clause
-- Force. ARGV: channel. Administrative release: removes the lock whoever
-- holds it and hands it to the first live waiter. Returns {owner, count,
-- token} of what was removed ({owner, count, token, '', error} if the
-- waiter it was handed to could not be notified), or nil if the lock was
-- free.
--! include fence.lua
--! include queue.lua
--! include native_shape.lua
local h = redis.call('HMGET', KEYS[1], 'owner', 'count', 'token')
if not h[1] then return false end
redis.call('DEL', KEYS[1])
local e = grant_head(ARGV[1])
if e then return {h[1], h[2], h[3], '', e} end
return h
