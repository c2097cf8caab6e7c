-- SPDX-License-Identifier: BSD-3-Clause
-- Acquire, fast form: the client sends it while the lock's name has not
-- been contended, so that the common case carries three keys and three
-- arguments instead of the full script's five and five (each costs Redis
-- time). KEYS: lock, fence, queue. ARGV: owner, lease_ms, nonce.
-- Returns the token (a fresh acquisition, count 1), or 0: nothing was
-- done, and the full acquire script decides (busy, waiters, a new counter
-- is seeded there too, someone's data under the name).
--! include native_take.lua
return 0
