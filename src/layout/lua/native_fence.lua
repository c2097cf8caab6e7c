-- SPDX-License-Identifier: BSD-3-Clause
-- The fencing token of a hold taken without one (a lean acquisition),
-- drawn when its holder first asks for it. KEYS: lock, fence. ARGV:
-- "<owner> <nonce> " (how the hold's value starts). Returns the token, or
-- -1 if the hold is gone. The token is drawn only while the hold is there
-- and its lease lasts, and kept in the value, so that asking again gives
-- the same one: every hold's token is drawn within the hold, after every
-- earlier holder's hold ended, and so is greater than theirs.
--! include native_value.lua
local v = redis.call('GET', KEYS[1])
if not v or string.find(v, ARGV[1], 1, true) ~= 1 then return -1 end
local o, non, cnt, w, tok, e = parse(v)
if not o or not live(w, e) then return -1 end
if tok ~= '0' then return tonumber(tok) end
local t = next_token()
redis.call('SET', KEYS[1], value(o, non, cnt, w, t, e), 'KEEPTTL')
return tonumber(t)
