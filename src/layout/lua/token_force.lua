-- SPDX-License-Identifier: BSD-3-Clause
-- Force: deletes the lock whoever holds it; returns the value it had, or
-- nil. ARGV: "1" to delete a key without expiry too: every lock of this
-- layout has one but redis-py's Lock made without a timeout, and a plain
-- string with none is more likely an application's own data under the
-- name, so the operator must say so.
--! include token_shape.lua
local v = redis.call('GET', KEYS[1])
if v and ARGV[1] ~= '1' and redis.call('PTTL', KEYS[1]) == -1 then
  return {0, 'the key has no expiry (a lock of this layout has one, but ' ..
             'for redis-py\'s Lock without a timeout): refused unless ' ..
             'a key without expiry is allowed'}
end
if v then redis.call('DEL', KEYS[1]) end
return v
