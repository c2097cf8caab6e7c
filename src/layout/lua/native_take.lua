-- SPDX-License-Identifier: BSD-3-Clause
-- The uncontended acquisition with its token, shared by the acquire
-- script and its fenced fast form (included where each begins): the lock
-- free and nobody queued (one EXISTS asks both), not a re-entry. Three
-- commands (EXISTS, INCR, SET PX) and an integer answer, the token. KEYS
-- 1-3 are lock, fence and queue; ARGV 1-3 owner, lease_ms and nonce;
-- ARGV[4] the mode, absent in the fast form. (A queue keeps its lock key
-- alive, so the lock key alone would tell; the queue is asked too, for
-- the cost of one more key in the same command.)
if ARGV[4] ~= 'r' and redis.call('EXISTS', KEYS[1], KEYS[3]) == 0 then
  local t = redis.call('INCR', KEYS[2])
  if t == 1 then
    -- A new counter starts at the server's clock in microseconds (see
    -- next_token in fence.lua).
    local tm = redis.call('TIME')
    t = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
    redis.call('SET', KEYS[2], string.format('%.0f', t))
  end
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[3] .. ' 1 0 ' ..
             string.format('%.0f', t), 'PX', ARGV[2])
  return t
end
