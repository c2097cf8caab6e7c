/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * What the lock logic asks of Redis and what comes back, in a form that
 * both sides share without knowing each other: a layout builds a request
 * (a script, its keys and arguments), a backend carries it to the nodes
 * that hold the keys and hands back one result per node.
 */
#ifndef RLOCK_CORE_REQUEST_H
#define RLOCK_CORE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "compat/hiredis_compat.h"
#include "util/err.h"

/* A Lua script, embedded at build time from src/layout/lua (the SHA-1
 * that EVALSHA names it by is computed then too); or, with command set,
 * a plain Redis command (no body, no digest), for a request that needs
 * no script at all: the keys and arguments follow the command's name.
 * With each set too, a pipeline of such commands, each of each arguments
 * (its name first), one after the other in the request, sent together;
 * their answers come back one per command (rlock__result.replies). */
typedef struct rlock__script {
    const char *name; /* for messages: "acquire", "token release", ... */
    const char *body;
    size_t len;
    const char *sha;     /* 40 hex digits */
    const char *command; /* NULL for a script */
    int each;            /* > 0: a pipeline of commands of each args */
} rlock__script;

/* Most nodes a request goes to (Redlock's largest). */
#define RLOCK__NODES_MAX 16

/* Storage of a request's formatted arguments: chunks that never move, so
 * that the pointers in argv stay good while the request grows. */
typedef struct rlock__chunk {
    struct rlock__chunk *next;
    size_t cap, used;
    char data[];
} rlock__chunk;

#define RLOCK__REQ_SMALL 24

/*
 * EVALSHA sha nkeys keys... args... (or COMMAND keys... args... for a
 * plain command), built in place: keys first, then arguments. Strings
 * added with _key/_arg are borrowed (they must outlive the request);
 * those added with _argu/_argi/_argf are copied into the request.
 */
typedef struct rlock__req {
    const rlock__script *script;
    int replicas; /* > 0: WAIT for that many replicas in the same write */
    int argc;     /* head + nkeys + nargs */
    int head;     /* 3 (EVALSHA sha nkeys) or 1 (a command's name) */
    int nkeys;
    int failed; /* out of memory while building: RLOCK_ENOMEM */
    /* An undo (RLOCK__X_BEHIND): what names it, its acquisition's nonce,
     * so that a node queues it once behind each connection that owes a
     * reply, however often it is sent again. */
    uint64_t tag;
    const char **argv;
    size_t *lens;
    int cap;
    char nk[12];
    const char *small_argv[RLOCK__REQ_SMALL];
    size_t small_lens[RLOCK__REQ_SMALL];
    rlock__chunk *chunks;
    char small_buf[256];
    size_t small_used;
} rlock__req;

void rlock__req_init(rlock__req *r, const rlock__script *s);
/* Whether the request runs a script (it may meet NOSCRIPT). */
int rlock__req_is_script(const rlock__req *r);
/* The request's first key (it routes the request on a cluster), or NULL
 * if it has none. */
const char *rlock__req_first_key(const rlock__req *r, size_t *len);
void rlock__req_free(rlock__req *r);
/* Keys: all of them before the first argument. */
void rlock__req_key(rlock__req *r, const char *p, size_t len);
void rlock__req_arg(rlock__req *r, const char *p, size_t len);
void rlock__req_args(rlock__req *r, const char *s); /* NUL-terminated */
void rlock__req_argu(rlock__req *r, uint64_t v);
void rlock__req_argi(rlock__req *r, int64_t v);
/* An argument of len bytes at p, copied into the request. */
void rlock__req_argcopy(rlock__req *r, const char *p, size_t len);
/* A key, or an argument, of len bytes that the caller writes at the
 * pointer returned, in the request's own storage (NULL: out of memory,
 * the request failed). */
char *rlock__req_keyroom(rlock__req *r, size_t len);
char *rlock__req_argroom(rlock__req *r, size_t len);
/* A pipeline's next command (its script's each > 0): the command's
 * name, unless it is the first (the request's head), then key, which
 * routes the request if it is the first. Its other arguments follow. */
void rlock__req_command(rlock__req *r, const char *key, size_t len);
/* How many commands a pipeline holds (0 for any other request). */
int rlock__req_commands(const rlock__req *r);
/* Before sending: the argv ready (nkeys filled), RLOCK_OK or
 * RLOCK_ENOMEM; a pipeline whose commands are not each of each
 * arguments is RLOCK_EINVAL. */
int rlock__req_finish(rlock__req *r);

/* What one node made of a request. */
typedef struct rlock__result {
    int rc;            /* RLOCK_OK: reply is the script's answer */
    redisReply *reply; /* owned here (rlock__results_free) */
    /* A pipeline's answers instead, one per command, error replies among
     * them (rc is RLOCK_OK once they all came); owned here too. */
    redisReply **replies;
    size_t nreplies;
    int sent;          /* some of the request was written: when rc is not
                          RLOCK_OK, Redis may have carried it out */
    long long acks;    /* req->replicas > 0: replicas that took the
                          write in time, -1 if WAIT failed */
    rlock__err err;    /* rc != RLOCK_OK: what happened, naming the node */
} rlock__result;

typedef struct rlock__results {
    int n;            /* one per node of the backend, in its order */
    int cap;          /* room in r */
    rlock__result *r; /* allocated while a request is in flight only: an
                         op that sleeps keeps no room for answers */
} rlock__results;

/* Room for n results, before a request is sent: RLOCK_OK, or
 * RLOCK_ENOMEM with res holding none. Whatever res held is forgotten
 * (it was freed, or never had any). */
int rlock__results_reserve(rlock__results *res, int n);
/* No results and no room: a request that was never sent. */
void rlock__results_none(rlock__results *res);
/* n results, none answered yet, in the room reserved (0: none, the room
 * kept for rlock__results_free). */
void rlock__results_init(rlock__results *res, int n);
/* Frees what the results hold but keeps their room: n is 0 (a request
 * routed again fills them anew). */
void rlock__results_clear(rlock__results *res);
/* Frees what the results hold, and their room. */
void rlock__results_free(rlock__results *res);
/* Frees what one result holds of the server's answer (reply, replies). */
void rlock__result_drop(rlock__result *r);

/* Whether a failed result may hide a success: the request was sent and
 * no usable reply came (connection lost, no reply by the deadline, a
 * reply too large to read, the call canceled while it was in flight: an
 * attempt then is undone). A failure before sending is not. */
int rlock__result_unknown(const rlock__result *r);

#endif
