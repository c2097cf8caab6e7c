/*
 * Operators' API: a lock's status, the administrative release, ping, and
 * cancelling waits.
 */
#include <string.h>

#include "harness/test.h"

TEST(status_force_unlock_ping_and_cancel)
{
    rt_server *s = rt_server_start(NULL);
    rlock_client *a = rt_client(rt_server_url(s), NULL);
    rlock_client *b = rt_client(rt_server_url(s), NULL);
    rlock_mutex *ma = rt_mutex(a, "admin", NULL);
    rlock_mutex *mb = rt_mutex(b, "admin", NULL);
    rt_locker w;
    rlock_server_info info;
    rlock_status st;
    redisReply *r;

    CHECK_RC(rlock_mutex_status(ma, &st), RLOCK_OK);
    CHECK(!st.held && st.count == 0 && st.lease_ms == -1 && st.token == 0);
    CHECK(st.last_token == 0 && st.waiters == 0 && st.holder[0] == '\0');
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    CHECK_RC(rlock_mutex_lock(ma), RLOCK_OK);
    rt_locker_start(&w, mb, 0);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:admin}:queue") == 1, 5000);
    CHECK_RC(rlock_mutex_status(mb, &st), RLOCK_OK);
    r = rt_cmd(s, "HGET {rlock:admin} owner");
    CHECK(st.held && strcmp(st.holder, r->str) == 0);
    freeReplyObject(r);
    CHECK_INT(st.count, ==, 2);
    CHECK_INT(st.lease_ms, >, 25000);
    CHECK(st.token == rlock_mutex_token(ma) && st.last_token == st.token);
    CHECK_INT(st.waiters, ==, 1);

    /* Cancelling b's waits: its lock call returns, its place is gone. */
    rlock_client_cancel_waits(b);
    CHECK_RC(rt_locker_join(&w), RLOCK_ECANCELED);
    CHECK_INT(rt_cmd_int(s, "LLEN {rlock:admin}:queue"), ==, 0);

    /* A later wait is not cancelled; the force release hands it over. */
    rt_locker_start(&w, mb, 0);
    RT_WAIT_UNTIL(rt_cmd_int(s, "LLEN {rlock:admin}:queue") == 1, 5000);
    CHECK_RC(rlock_mutex_force_unlock(ma, &st), RLOCK_OK);
    CHECK(st.held && st.count == 2 && st.token > 0);
    CHECK_RC(rt_locker_join(&w), RLOCK_OK);
    CHECK_RC(rlock_mutex_unlock(ma), RLOCK_ELOST);
    CHECK_RC(rlock_mutex_force_unlock(ma, &st), RLOCK_OK); /* b's now */
    CHECK(st.held && st.count == 1);
    CHECK_RC(rlock_mutex_force_unlock(ma, &st), RLOCK_OK);
    CHECK(!st.held);

    CHECK_RC(rlock_client_ping(a, &info), RLOCK_OK);
    CHECK(strncmp(info.version, "7.", 2) == 0 || strncmp(info.version, "6.", 2) == 0);
    CHECK_INT(info.rtt_us, >=, 0);
    CHECK_RC(rlock_client_ping(a, NULL), RLOCK_EINVAL);
    CHECK_RC(rlock_mutex_status(ma, NULL), RLOCK_EINVAL);

    rlock_mutex_free(ma);
    rlock_mutex_free(mb);
    rlock_client_close(a);
    rlock_client_close(b);
    rt_server_stop(s);
}
