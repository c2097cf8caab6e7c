/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * --help texts. They say what rlock(1) says; keep the two together.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

void usage_main(FILE *out)
{
    fputs(
        "usage: rlock [--redis URL] COMMAND [ARGS]\n"
        "\n"
        "Distributed locks on Redis, from the shell.\n"
        "\n"
        "commands:\n"
        "  run [-w DUR | -n] [-l DUR] [-E N] [-q] [-v] [--on-lost kill|ignore]\n"
        "      [--kill-after DUR] [--layout L] NAME -- COMMAND [ARG...]\n"
        "                 run COMMAND while holding the lock NAME\n"
        "  status [--json] [--layout L] [-v] NAME...\n"
        "                 show who holds each lock, its lease, token and waiters\n"
        "  unlock --force [--no-expiry] [--layout L] [-v] NAME\n"
        "                 remove a lock whoever holds it, waking its waiters\n"
        "  list [--json] [--all] [--layout L] [-v] [PATTERN]\n"
        "                 the locks of every layout on the servers: holder,\n"
        "                 lease, count, waiters, last token\n"
        "  top [--once] [--interval DUR] [--layout L] [-v] [PATTERN]\n"
        "                 a live view of the busiest locks (q quits, s sorts)\n"
        "  ping [-v]      connect, authenticate, show the server version and round trip\n"
        "  demo [--workers N] [--seconds S]\n"
        "                 N processes contend for one lock on a private redis-server\n"
        "\n"
        "options:\n"
        "  --redis URL    redis://[user[:password]@]host[:port][/db][?PARAMS],\n"
        "                 rediss://... (TLS) or unix:///path/to/socket[?PARAMS]\n"
        "                 (PARAMS: db=N, tls=1, cacert=, cert=, key=, sni=,\n"
        "                 insecure=1; the TLS ones also after sentinel, cluster\n"
        "                 and redlock URLs); default: $RLOCK_URL, then $REDIS_URL,\n"
        "                 then redis://127.0.0.1:6379\n"
        "  --tls          use TLS (also for sentinel, cluster and redlock URLs)\n"
        "  --cacert FILE  trust these CAs (PEM) instead of the system's\n"
        "  --cert FILE, --key FILE\n"
        "                 client certificate and key (mutual TLS)\n"
        "  --sni NAME     the server name to send and verify\n"
        "  --insecure     TLS without verifying the server (tests only)\n"
        "  --password-file FILE\n"
        "                 the password, from the first line of FILE (or set\n"
        "                 $RLOCK_PASSWORD); never in a command line\n"
        "  --user NAME    the ACL user for that password\n"
        "  --version      print the version\n"
        "  --help         this text; 'rlock COMMAND --help' for a command\n"
        "\n"
        "DUR is 250ms, 30s, 5m, 1h or plain seconds (2.5). --name=VALUE works too.\n"
        "-v (--verbose) after a command prints the client's events on stderr as they\n"
        "happen, one line each (acquired, renewed, released, lost, reconnect...).\n"
        "exit codes: 0 ok, 1 lock not obtained (-E), 64 usage, 65 not a lock (status,\n"
        "unlock: the key holds someone's data, left untouched), 69 Redis unavailable,\n"
        "70 internal error, 71 system error, 76 Redis error reply, 77 authentication\n"
        "or permission refused (an ACL without a command needed, such as SCAN for list\n"
        "and top), 79 lock lost while COMMAND ran, 126/127 COMMAND not runnable/found;\n"
        "run otherwise exits with COMMAND's status (128+N if it died of signal N).\n",
        out);
}

static const struct {
    const char *cmd;
    const char *text;
} texts[] = {
    {"run",
     "usage: rlock [--redis URL] run [options] NAME -- COMMAND [ARG...]\n"
     "\n"
     "Waits for the lock NAME, runs COMMAND while holding it, releases it when\n"
     "COMMAND ends, and exits with COMMAND's status (128+N if it died of signal\n"
     "N). COMMAND gets RLOCK_NAME, RLOCK_TOKEN (the fencing token) and\n"
     "RLOCK_URL (without password) in its environment. As with flock(1), the\n"
     "lock is held while any process of COMMAND's tree lives, background\n"
     "ones included; COMMAND runs in its own process group. SIGINT, SIGTERM\n"
     "and SIGHUP stop the whole tree (SIGKILL after --kill-after); other\n"
     "signals are passed on to it. If rlock is killed, the tree is stopped\n"
     "within a third of the lease. The lease is renewed in the background\n"
     "while COMMAND runs, unless --lease is given.\n"
     "\n"
     "  -w, --wait DUR            give up after DUR (default: wait forever)\n"
     "  -n, --nonblock            do not wait at all\n"
     "  -l, --lease DUR           fixed lease, not renewed\n"
     "  -E, --conflict-exit-code N\n"
     "                            exit status when the lock is not obtained\n"
     "                            (default 1)\n"
     "  -q, --quiet               nothing on stderr if the lock is not obtained\n"
     "  -v, --verbose             the client's events on stderr as they happen\n"
     "                            (acquired, renewed, released, lost, ...)\n"
     "      --on-lost kill|ignore if the lock is lost while COMMAND runs: kill\n"
     "                            (default) stops the tree as SIGTERM does and\n"
     "                            exits 79; ignore only warns\n"
     "      --kill-after DUR      from SIGTERM to SIGKILL (default 5s)\n"
     "      --layout native|redisson|token\n"
     "                            the lock's layout in Redis: rlock's own\n"
     "                            (default); Redisson's RLock hash, to share\n"
     "                            the lock with Java services; or the plain\n"
     "                            SET NX PX key that redis-py, node-redlock\n"
     "                            and others use (docs/interop.md)\n"},
    {"status",
     "usage: rlock [--redis URL] status [--json] "
     "[--layout native|redisson|token] [-v] NAME...\n"
     "\n"
     "For each NAME: free or held, the holder's owner id and process (pid and\n"
     "host), its hold count, the remaining lease, the current fencing token\n"
     "(the last one handed out if free) and the number of waiters. --json\n"
     "prints one JSON object per line. A key that is not a lock of the\n"
     "layout (someone's data) is refused: exit 65. -v prints the client's\n"
     "events (a connection lost and made again...) on stderr.\n"},
    {"unlock",
     "usage: rlock [--redis URL] unlock --force [--no-expiry] [--layout L] "
     "[-v] NAME\n"
     "\n"
     "Removes the lock NAME whoever holds it, hands it to the first waiter,\n"
     "and says what it removed. Its holder's next unlock or renewal reports\n"
     "the loss. Exits 0 if a hold was removed, 1 if the lock was free, 65\n"
     "(nothing removed) if the key is not a lock of the layout.\n"
     "--layout as for run. --no-expiry: with the token layout, also remove a\n"
     "key that has no expiry (redis-py's Lock without a timeout sets none;\n"
     "without it, such a key may be someone's data and is refused).\n"
     "-v prints the client's events on stderr.\n"},
    {"list",
     "usage: rlock [--redis URL] list [--json] [--all] "
     "[--layout native|redisson|token]\n"
     "                  [--max-locks N] [--max-keys N] [-v] [PATTERN]\n"
     "\n"
     "Finds the locks on the servers (every master of a cluster, every\n"
     "Redlock node) with SCAN, never KEYS, and prints one line per lock held\n"
     "or waited for: layout, holder (pid@host, or a peer's own id), lease\n"
     "left, hold count, waiters, last fencing token and name. PATTERN is a\n"
     "glob on lock names as Redis reads it (*, ?, [...], \\). A native lock\n"
     "is found by its keys, a token-layout lock by the counter rlock keeps\n"
     "beside it (a lock only peers ever took has none: use status), a\n"
     "Redisson lock by its hash or its counter; keys of other shapes are\n"
     "skipped. --json prints status --json's objects with a \"layout\".\n"
     "\n"
     "  --all            free locks known by their counters too\n"
     "  --layout L       only that layout's locks (a cheaper walk)\n"
     "  --max-locks N    read at most N locks (default 10000)\n"
     "  --max-keys N     let SCAN look at most at about N keys (default\n"
     "                   10000000); what a bound left out is said on stderr\n"
     "  -v, --verbose    print the client's events on stderr\n"},
    {"top",
     "usage: rlock [--redis URL] top [--once] [--interval DUR] [--layout L]\n"
     "                  [--max-locks N] [--max-keys N] [-v] [PATTERN]\n"
     "\n"
     "A live view of the busiest locks, drawn again in place every interval:\n"
     "holder, how long held (\">\": held already when first seen), lease\n"
     "left, waiters, and acquisitions per second (the growth of the lock's\n"
     "fencing counter). Keys: q quits, s sorts by the next column (acq/s,\n"
     "waiters, held, lease, name). Each refresh is bounded: it goes on with\n"
     "the walk over the keys for about --max-keys keys and reads at most\n"
     "--max-locks locks; the footer gives its commands and what it left\n"
     "out. Output that is not a terminal gets each refresh printed after the\n"
     "last, without escape codes.\n"
     "\n"
     "  --once           print one screen and exit (two reads an interval\n"
     "                   apart, for the rates)\n"
     "  --interval DUR   between refreshes (default 2s)\n"
     "  --layout L       only that layout's locks\n"
     "  --max-locks N    locks read per refresh (default 200)\n"
     "  --max-keys N     keys SCAN looks at per refresh (default 50000)\n"
     "  -v, --verbose    print the client's events on stderr (with --once,\n"
     "                   or with stderr not the terminal the view is on)\n"},
    {"ping",
     "usage: rlock [--redis URL] ping [-v]\n"
     "\n"
     "Connects and authenticates, then prints the server's version and the\n"
     "round-trip time of one PING. -v prints the client's events on stderr.\n"},
    {"demo",
     "usage: rlock [--redis URL] demo [--workers N] [--seconds S]\n"
     "\n"
     "Starts N worker processes (default 4) that, for S seconds (default 5),\n"
     "take the lock 'rlock:demo' and increment a shared counter in a file\n"
     "with a deliberately racy read, sleep, write. Shows live progress, then\n"
     "checks its verdict: the counter equals the number of acquisitions, no\n"
     "two holds overlapped, fencing tokens only grew. Without --redis it\n"
     "starts a private redis-server on a unix socket in a temporary directory\n"
     "and removes it afterwards.\n"},
};

int usage_for(const char *cmd, FILE *out)
{
    size_t i;

    for (i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        if (strcmp(texts[i].cmd, cmd) == 0) {
            fputs(texts[i].text, out);
            return 0;
        }
    }
    return -1;
}
