-- SPDX-License-Identifier: BSD-3-Clause
-- Force. ARGV: channel. Deletes the lock whoever holds it and wakes its
-- waiters, as Redisson's forceUnlock does; returns {field, count, '0',
-- who} ({field, count, '0', who, error} if the message could not be
-- published) or nil.
--! include redisson_shape.lua
--! include redisson_publish.lua
if not owner then return false end
redis.call('DEL', KEYS[1])
local e = publish(ARGV[1])
if e then return {owner, count, '0', who, e} end
return {owner, count, '0', who}
