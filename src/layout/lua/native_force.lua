-- SPDX-License-Identifier: BSD-3-Clause
-- Force. Administrative release: removes the lock whoever holds it and
-- hands it to the first live waiter. Returns {owner, count, token} of
-- what was removed ({owner, count, token, '', error} if the waiter it was
-- handed to could not be notified), or nil if the lock was free (a lease
-- that ended while waiters were queued is served to them all the same).
--! include native_lib.lua
--! include native_shape.lua
local o, _, cnt, w, tok, e = parse(redis.call('GET', KEYS[1]))
if not o then return false end
local was = live(w, e)
local _, err = free_lock()
if not was then return false end
if err then return {o, cnt, tok, '', err} end
return {o, cnt, tok}
