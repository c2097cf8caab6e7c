-- SPDX-License-Identifier: BSD-3-Clause
-- Force: deletes the lock whoever holds it; returns the value it had, or
-- nil.
--! include token_shape.lua
local v = redis.call('GET', KEYS[1])
if v then redis.call('DEL', KEYS[1]) end
return v
