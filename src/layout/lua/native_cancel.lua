-- SPDX-License-Identifier: BSD-3-Clause
-- Cancel. ARGV: owner, channel, nonce. An acquisition is given up: the
-- owner's place in the queue goes if that acquisition made it (its qinfo
-- names the nonce), and a hold that acquisition took without learning it
-- (a grant still on its way, or an attempt whose reply was lost) is given
-- back. Places and holds of a later acquisition carry another nonce and
-- are left alone. A free lock then goes to the first live waiter.
--! include fence.lua
--! include queue.lua
local info = redis.call('HGET', KEYS[5], ARGV[1])
if not info or string.match(info, ' (%d+)$') == ARGV[3] then
  dequeue(ARGV[1])
end
local h = redis.call('HMGET', KEYS[1], 'owner', 'attempt')
if h[1] == ARGV[1] and h[2] == ARGV[3] then
  redis.call('DEL', KEYS[1])
end
if redis.call('EXISTS', KEYS[1]) == 0 then grant_head(ARGV[2]) end
return 1
