-- SPDX-License-Identifier: BSD-3-Clause
-- Release. ARGV: "<owner> <nonce> " (the hold's own start), count (what
-- the owner holds before this release). Sets the count to count - 1, so
-- a release retried after a lost reply never releases twice. Returns the
-- remaining count (0: released, and handed to the first live waiter if
-- there is one), or -1 if this hold is not there (expired, deleted,
-- released by the lost first try, or another owner's lock, which is left
-- untouched); {0, error} if it was released but the waiter it was handed
-- to could not be notified.
--! include native_give.lua
--! include native_lib.lua
local o, non, cnt, w, tok, e = parse(v)
if not o then return -1 end
if not live(w, e) then
  -- Its lease ended while others waited: it is theirs already.
  free_lock()
  return -1
end
local n = tonumber(ARGV[2]) - 1
if n > 0 then
  redis.call('SET', KEYS[1], value(o, non, n, w, tok, e), 'KEEPTTL')
  return n
end
-- The last level: the lock goes to the first live waiter (replacing the
-- key), or away.
local _, err = free_lock()
if err then return {0, err} end
return 0
