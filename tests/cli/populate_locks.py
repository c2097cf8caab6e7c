#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""Writes, as Redis protocol for `redis-cli --pipe`, N held locks of each
of rlock's three layouts, keyed as rlock keeps them (docs/protocol.md,
docs/interop.md), each with its fencing counter:

  native    {rlock:PREFIXn:I}       "<owner> <nonce> 1 0 <token>" PX lease
            {rlock:PREFIXn:I}:fence <token>
  token     PREFIXt:I               "<owner>.<nonce>:<token>" PX lease
            PREFIXt:I:rlock-fence   <token>
  Redisson  PREFIXr:I (hash)        "<uuid>:<nonce>" = 1,
                                    rlock-holder = "<host>/<pid>"; PEXPIRE
            redisson_lock_token:{PREFIXr:I}  <token>

  populate_locks.py N [PREFIX] [LEASE_MS]
"""
import sys

n = int(sys.argv[1])
prefix = sys.argv[2] if len(sys.argv) > 2 else ""
lease = sys.argv[3] if len(sys.argv) > 3 else "600000"
out = sys.stdout.buffer
client = "0123456789abcdef0123456789abcdef"
uuid = "01234567-89ab-cdef-0123-456789abcdef"


def cmd(*args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        b = a.encode() if isinstance(a, str) else a
        parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(parts)


batch = []
for i in range(n):
    token = str(1700000000000000 + i)
    owner = "%s@host-%d/%d:1" % (client, i % 7, 1000 + i % 50)
    name = "%sn:%d" % (prefix, i)
    batch.append(cmd("SET", "{rlock:%s}" % name,
                     "%s %d 1 0 %s" % (owner, i + 1, token), "PX", lease))
    batch.append(cmd("SET", "{rlock:%s}:fence" % name, token))
    name = "%st:%d" % (prefix, i)
    batch.append(cmd("SET", name, "%s.%d:%s" % (owner, i + 1, token),
                     "PX", lease))
    batch.append(cmd("SET", name + ":rlock-fence", token))
    name = "%sr:%d" % (prefix, i)
    batch.append(cmd("HSET", name, "%s:%d" % (uuid, i + 1), "1",
                     "rlock-holder", "host-%d/%d" % (i % 7, 2000 + i % 50)))
    batch.append(cmd("PEXPIRE", name, lease))
    batch.append(cmd("SET", "redisson_lock_token:{%s}" % name, token))
    if len(batch) >= 7000:
        out.write(b"".join(batch))
        batch = []
out.write(b"".join(batch))
