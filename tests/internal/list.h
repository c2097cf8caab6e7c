/* SPDX-License-Identifier: BSD-3-Clause */
/* The tests of the library's interior (rlock_internal_tests), with their
 * time limits in seconds. */
RT_TEST(an_exchange_is_driven_by_readiness_and_never_blocks_the_loop, 30)
RT_TEST(an_exchange_with_a_silent_server_ends_at_its_deadline, 30)
RT_TEST(a_queued_leg_is_told_when_a_connection_comes_back, 30)
RT_TEST(an_attempt_extend_and_release_run_as_objects_on_a_loop, 60)
RT_TEST(a_redlock_attempt_asks_every_master_in_one_round, 60)
RT_TEST(a_wait_runs_as_an_object_and_is_woken_by_the_release, 60)
RT_TEST(the_watchdogs_renewals_run_as_an_object_on_a_loop, 60)
RT_TEST(a_loop_thread_runs_many_waits_beside_blocking_holders, 180)
RT_TEST(a_readiness_looks_at_its_own_task_and_not_at_every_one, 60)
RT_TEST(a_wait_on_a_loop_ends_at_its_deadline, 60)
RT_TEST(a_broken_connection_is_unwatched_before_it_closes, 60)
RT_TEST(a_connection_stays_watched_between_requests_and_not_after_it_closes, 60)
RT_TEST(the_loop_renews_holds_and_starts_no_thread, 60)
RT_TEST(losses_are_told_on_the_loop_thread_never_renewed_late, 60)
RT_TEST(the_loops_subscriber_connects_in_steps_and_a_free_cancels, 90)
