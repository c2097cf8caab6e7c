-- SPDX-License-Identifier: BSD-3-Clause
-- Status, as rlock's own snapshot with the holder's identity: {field or
-- '', count, '0', pttl, last fencing token, 0, who}; no token is kept
-- with the hold, and nobody queues.
--! include redisson_shape.lua
return {owner or '', count or '0', '0', redis.call('PTTL', KEYS[1]),
        redis.call('GET', KEYS[2]) or '0', 0, who}
