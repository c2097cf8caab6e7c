-- SPDX-License-Identifier: BSD-3-Clause
-- Status: {value or '', pttl, last fencing token}.
--! include token_shape.lua
return {redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1]),
        redis.call('GET', KEYS[2]) or '0'}
