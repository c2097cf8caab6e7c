-- SPDX-License-Identifier: BSD-3-Clause
-- Release. ARGV: "<owner> <token> " (the hold's own start), count (what
-- the owner holds before this release). Sets the count to count - 1, so
-- a release retried after a lost reply never releases twice. Returns the
-- remaining count (0: released, and handed to the first live waiter if
-- there is one), or -1 if this owner's hold with this token is not there
-- (expired, deleted, released by the lost first try, or another owner's
-- lock, which is left untouched); {0, error} if it was released but the
-- waiter it was handed to could not be notified.
--! include native_give.lua
--! include native_lib.lua
local n = tonumber(ARGV[2]) - 1
if n > 0 then
  local o, tok, non, _, w = parse(v)
  redis.call('SET', KEYS[1], value(o, tok, non, n, w), 'KEEPTTL')
  return n
end
-- The last level: the lock goes to the first live waiter (replacing the
-- key), or away.
local granted, e = grant_head()
if not granted then redis.call('DEL', KEYS[1]) end
if e then return {0, e} end
return 0
