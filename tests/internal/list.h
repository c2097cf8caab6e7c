/* SPDX-License-Identifier: BSD-3-Clause */
/* The tests of the library's interior (rlock_internal_tests), with their
 * time limits in seconds. */
RT_TEST(an_exchange_is_driven_by_readiness_and_never_blocks_the_loop, 30)
RT_TEST(an_exchange_with_a_silent_server_ends_at_its_deadline, 30)
