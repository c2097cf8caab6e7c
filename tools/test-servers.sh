# SPDX-License-Identifier: BSD-3-Clause
# Sourced by tools/test.sh and tools/matrix.sh: builds, once each, the
# servers that only some tests run, for what Debian 12's servers lack, and
# exports where they are:
#   RLOCK_TEST_VALKEY81       Valkey 8.1, Debian 13's (SET ... IFEQ: the
#                             watchdog's native renewal; tools/valkey81.sh)
#   RLOCK_TEST_VALKEY_NEWEST  sid's Valkey (9.x: DELIFEQ)
#   RLOCK_TEST_REDIS_NEWEST   experimental's Redis (8.4 and later: DELEX),
#                             the last two by tools/newserver.sh; the
#                             native compare-and-delete release
RLOCK_TEST_VALKEY81=$(tools/valkey81.sh)
RLOCK_TEST_VALKEY_NEWEST=$(tools/newserver.sh valkey)
RLOCK_TEST_REDIS_NEWEST=$(tools/newserver.sh redis)
export RLOCK_TEST_VALKEY81 RLOCK_TEST_VALKEY_NEWEST RLOCK_TEST_REDIS_NEWEST
