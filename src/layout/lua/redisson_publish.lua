-- SPDX-License-Identifier: BSD-3-Clause
-- The Redisson layout's release message: "0" on the lock's channel, with
-- PUBLISH and with SPUBLISH (Redisson's sharded mode on a Redis 7
-- cluster; Redis 6 has none, hence pcall). The channel has the lock's
-- hash tag, so both stay in the script's slot. A refused PUBLISH (an ACL
-- user without it) must not undo what the script did: it is returned, as
-- text, for the caller to report.
local function publish(channel)
  local r = redis.pcall('PUBLISH', channel, '0')
  redis.pcall('SPUBLISH', channel, '0')
  if type(r) == 'table' and r.err then return r.err end
  return nil
end
