-- SPDX-License-Identifier: BSD-3-Clause
-- Force. Administrative release: removes the lock whoever
-- holds it and hands it to the first live waiter. Returns {owner, count,
-- token} of what was removed ({owner, count, token, '', error} if the
-- waiter it was handed to could not be notified), or nil if the lock was
-- free.
--! include native_lib.lua
--! include native_shape.lua
local o, tok, _, cnt = parse(redis.call('GET', KEYS[1]))
if not o then return false end
local granted, e = grant_head()
if not granted then redis.call('DEL', KEYS[1]) end
if e then return {o, cnt, tok, '', e} end
return {o, cnt, tok}
