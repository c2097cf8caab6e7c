/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * Many lock chains on one libuv loop thread.
 *
 *   uv_lock URL [CHAINS] [ROUNDS]
 *
 * CHAINS (default 8) handles of the lock "uv:demo" each take it ROUNDS
 * times (default 5), hold it for 10 ms (a uv timer: the loop goes on
 * meanwhile), and let go; they wait for each other in FIFO order, woken
 * by pub/sub, all on the one thread. Run several at once, on one machine
 * or many: the critical sections of all of them never overlap. Prints
 * each chain's tokens and exits 0 if every round got the lock, with a
 * fencing token larger than the one before.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include <rlock/adapters/libuv.h>

typedef struct chain {
    int id, round;
    rlock_async_mutex *m;
    uv_timer_t hold;
} chain;

static int rounds = 5, chains = 8, inside, overlaps, failures, finished;
static uint64_t last_token;
static rlock_async *client;

static void take(chain *ch);

static void unlocked(rlock_async_mutex *m, int status, void *arg)
{
    chain *ch = arg;

    if (status != RLOCK_OK) {
        fprintf(stderr, "chain %d: unlock: %s\n", ch->id,
                rlock_async_errmsg(m));
        failures++;
    }
    if (++ch->round < rounds)
        take(ch);
    else if (++finished == chains)
        rlock_async_close(client); /* the loop has nothing left: it ends */
}

static void held(uv_timer_t *t)
{
    chain *ch = t->data;

    inside--;
    if (rlock_async_unlock(ch->m, unlocked, ch) != RLOCK_OK)
        failures++;
}

static void locked(rlock_async_mutex *m, int status, uint64_t token, void *arg)
{
    chain *ch = arg;

    if (status != RLOCK_OK) {
        fprintf(stderr, "chain %d: lock: %s\n", ch->id, rlock_async_errmsg(m));
        failures++;
        unlocked(m, RLOCK_OK, ch);
        return;
    }
    if (inside++ > 0)
        overlaps++;
    if (token <= last_token)
        failures++;
    last_token = token;
    printf("chain %d round %d token %llu\n", ch->id, ch->round,
           (unsigned long long)token);
    uv_timer_start(&ch->hold, held, 10, 0);
}

static void take(chain *ch)
{
    if (rlock_async_lock(ch->m, 30000, locked, ch) != RLOCK_OK) {
        fprintf(stderr, "chain %d: %s\n", ch->id, rlock_async_errmsg(ch->m));
        failures++;
    }
}

int main(int argc, char **argv)
{
    uv_loop_t *loop = uv_default_loop();
    chain *all;
    int err, i;

    if (argc < 2) {
        fprintf(stderr, "usage: uv_lock URL [CHAINS] [ROUNDS]\n");
        return 2;
    }
    if (argc > 2)
        chains = atoi(argv[2]);
    if (argc > 3)
        rounds = atoi(argv[3]);
    if (chains < 1 || rounds < 1 ||
        !(all = calloc((size_t)chains, sizeof *all)))
        return 2;
    if (!(client = rlock_async_open(argv[1], NULL, &err)) ||
        rlock_libuv_attach(client, loop) != RLOCK_OK) {
        fprintf(stderr, "uv_lock: %s\n", rlock_async_errmsg(NULL));
        return 1;
    }
    for (i = 0; i < chains; i++) {
        all[i].id = i;
        uv_timer_init(loop, &all[i].hold);
        all[i].hold.data = &all[i];
        if (!(all[i].m =
                  rlock_async_mutex_new(client, "uv:demo", NULL, &err))) {
            fprintf(stderr, "uv_lock: %s\n", rlock_async_errmsg(NULL));
            return 1;
        }
        take(&all[i]);
    }
    /* The chains' timers keep the loop alive only while they run. */
    for (i = 0; i < chains; i++)
        uv_unref((uv_handle_t *)&all[i].hold);
    uv_run(loop, UV_RUN_DEFAULT);
    for (i = 0; i < chains; i++)
        uv_close((uv_handle_t *)&all[i].hold, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    printf("uv_lock: %d chains, %d rounds each: %d overlaps, %d failures\n",
           chains, rounds, overlaps, failures);
    uv_loop_close(loop);
    free(all);
    return overlaps || failures || finished != chains ? 1 : 0;
}
