-- SPDX-License-Identifier: BSD-3-Clause
-- The lock's value, which every script of rlock's own layout reads
-- (comment lines are dropped when the scripts are embedded):
--
--   "<owner> <nonce> <count> <w> <token>"            w = 0
--   "<owner> <nonce> <count> 1 <token> <end_ms>"     w = 1
--
-- The owner and the nonce of the acquisition that took it name the hold
-- (every request about a hold starts by comparing "<owner> <nonce> ");
-- count is the re-entry count; token the fencing token, 0 until it is
-- drawn (a lean acquisition, a plain SET NX PX from the client, draws
-- none: native_fence.lua draws it when the holder first asks); w is 1
-- while waiters may be queued behind the holder. While w is 0 the lease
-- is the key's expiry; while it is 1 the lease ends at end_ms (server
-- milliseconds) and the key is kept at least as long as the queue, so
-- that a queue never exists without its lock key and a newcomer's SET NX
-- can never take a lock that queued waiters are owed.
--
-- fence.lua: replicate_commands(), now_ms() and next_token(), which
-- every layout's acquisition shares.
--! include fence.lua
-- The server's clock, read at most once per script.
local now
local function clock()
  if not now then now = now_ms() end
  return now
end
local function value(owner, nonce, count, w, token, e)
  local v = owner .. ' ' .. nonce .. ' ' .. count .. ' ' .. w .. ' ' .. token
  if w == '1' then v = v .. ' ' .. string.format('%.0f', e) end
  return v
end
-- The fields of a value (nil for anything else); end_ms as a number.
local function parse(v)
  local o, non, cnt, w, tok, e = string.match(v or '',
    '^(%S+) (%d+) (%d+) ([01]) (%d+) ?(%d*)$')
  if not o or (w == '1') ~= (e ~= '') then return nil end
  return o, non, cnt, w, tok, tonumber(e)
end
-- Whether the holder's lease lasts.
local function live(w, e)
  return w == '0' or e > clock()
end
-- Sets a live hold's lease to lease ms from now (extend, renew): the
-- key's expiry; or, while waiters may be queued, the end in the value,
-- the key kept for at least as long as it was.
local function stretch(key, o, non, cnt, w, tok, lease)
  if w == '0' then
    redis.call('PEXPIRE', key, lease)
    return
  end
  redis.call('SET', key, value(o, non, cnt, '1', tok, clock() + lease), 'PX',
             math.max(lease, redis.call('PTTL', key)))
end
