-- SPDX-License-Identifier: BSD-3-Clause
-- Release, fast form, for the last level of a hold while the lock's name
-- has not been contended. KEYS: lock. ARGV: "<owner> <nonce> ". Returns 0
-- (released), -1 (this hold is not there), or -2: nothing was done,
-- waiters may be queued (or the count is not 1), and the full release
-- script must decide.
--! include native_give.lua
return -2
