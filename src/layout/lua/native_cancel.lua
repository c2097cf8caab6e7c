-- SPDX-License-Identifier: BSD-3-Clause
-- Cancel. ARGV: owner, nonce. An acquisition is given up: the
-- owner's place in the queue goes if that acquisition made it (its qinfo
-- names the nonce), and a hold that acquisition took without learning it
-- (a grant still on its way, or an attempt whose reply was lost) is given
-- back. Places and holds of a later acquisition carry another nonce and
-- are left alone. A free lock then goes to the first live waiter.
--! include native_lib.lua
local info = redis.call('HGET', KEYS[5], ARGV[1])
if not info or string.match(info, ' (%d+)$') == ARGV[2] then
  dequeue(ARGV[1])
end
local v = redis.call('GET', KEYS[1])
local o, _, non = parse(v)
if o == ARGV[1] and non == ARGV[2] then
  redis.call('DEL', KEYS[1])
  v = nil
end
if not v then grant_head() end
return 1
