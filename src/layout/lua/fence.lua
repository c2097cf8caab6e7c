-- SPDX-License-Identifier: BSD-3-Clause
-- The fencing counter, shared by every layout's acquire script (comment
-- lines are dropped when the scripts are embedded). KEYS[2] is the
-- counter.
--
-- replicate_commands() lets Redis 5 and 6 accept writes after TIME; Redis
-- 7 always replicates effects.
if redis.replicate_commands then redis.replicate_commands() end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- The next fencing token. A missing counter (a new name, or a Redis that
-- restarted without persistence, or an evicted or deleted key) starts at
-- the server's clock in microseconds: greater than every token handed out
-- before, unless that clock stepped back or tokens were drawn faster than
-- one per microsecond on average. (INCR of a missing key gives 1; the
-- counter is never 0 otherwise. %.0f, not tostring: Lua would print 16
-- digits as 1.7e+15; exact below 2^53, unlike %d, which goes through a C
-- long.)
local function next_token()
  local n = redis.call('INCR', KEYS[2])
  if n ~= 1 then return string.format('%.0f', n) end
  local t = redis.call('TIME')
  local seed = t[1] .. string.format('%06d', tonumber(t[2]))
  redis.call('SET', KEYS[2], seed)
  return seed
end
