-- SPDX-License-Identifier: BSD-3-Clause
-- Release, fast form, for the last level of a hold while the lock's name
-- has not been contended. KEYS: lock. ARGV: "<owner> <token> ". Returns 0
-- (released), -1 (this owner's hold with this token is not there), or -2:
-- nothing was done, waiters may be queued, and the full release script
-- must hand the lock over.
--! include native_give.lua
return -2
