-- SPDX-License-Identifier: BSD-3-Clause
-- Cancel. ARGV: owner, nonce. An acquisition is given up: the owner's
-- place in the queue goes if that acquisition made it (its qinfo entry
-- names the nonce), and a hold that acquisition took without learning it
-- (a grant still on its way, or an attempt whose reply was lost) is given
-- back. Places and holds of a later acquisition carry another nonce and
-- are left alone. A free lock then goes to the first live waiter.
--! include native_lib.lua
local dl, _, nonce = entry(ARGV[1])
if not dl or nonce == ARGV[2] then dequeue(ARGV[1]) end
local v = redis.call('GET', KEYS[1])
local o, non, _, w, _, e = parse(v)
if (o == ARGV[1] and non == ARGV[2]) or not v or (o and not live(w, e)) then
  -- Given back, or free: to the first live waiter, or away.
  free_lock()
end
return 1
