# SPDX-License-Identifier: BSD-3-Clause
"""A Redisson RLock client, played in Python, for rlock's Redisson layout.

Redisson (Java) cannot be installed on the machines this project builds on,
so interop_test.sh runs this instead. It does on the wire what Redisson's
RLock does (docs/interop.md says which versions): the lock is a hash under
the lock's name whose field "<client UUID>:<thread id>" holds the hold
count; a try that finds the lock busy answers its PTTL; a waiter subscribes
to redisson_lock__channel:{name} and tries again after each message, or
after that PTTL; the final unlock deletes the hash and publishes 0 there,
with the "unlock latch" key of Redisson 3.24 and later making a retried
unlock harmless.

    redisson_peer.py SOCKET work DIR ID RUNS   the critical section, RUNS
                                               times (section.sh DIR ID)
    redisson_peer.py SOCKET hold NAME COUNT SECONDS
                                               take NAME COUNT times, print
                                               "held", then COUNT times:
                                               wait, print "unlocking I",
                                               unlock, print what the
                                               unlock answered
    redisson_peer.py SOCKET wait NAME          take NAME waiting as
                                               Redisson does; print the
                                               seconds it took and the
                                               messages it got
"""
import subprocess
import sys
import threading
import time
import uuid

import redis

CLIENT = str(uuid.uuid4())  # Redisson's client id
LEASE_MS = 30000  # Redisson's lockWatchdogTimeout

# Held or re-entered: nil; busy: the PTTL.
LOCK = """
if redis.call('EXISTS', KEYS[1]) == 0
   or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return nil
end
return redis.call('PTTL', KEYS[1])
"""

# 1 released, 0 still held, nil not held; KEYS: lock, channel, latch.
UNLOCK = """
local seen = redis.call('GET', KEYS[3])
if seen then return tonumber(seen) end
if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0 then return nil end
if redis.call('HINCRBY', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('SET', KEYS[3], 0, 'PX', ARGV[5])
  return 0
end
redis.call('DEL', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('SET', KEYS[3], 1, 'PX', ARGV[5])
return 1
"""


def prefix_name(prefix, name):
    """Redisson's name for a lock's companion key or channel."""
    return f"{prefix}:{name}" if "{" in name else f"{prefix}:{{{name}}}"


class RLock:
    def __init__(self, r, name):
        self.r = r
        self.name = name
        self.channel = prefix_name("redisson_lock__channel", name)
        self.lock_script = r.register_script(LOCK)
        self.unlock_script = r.register_script(UNLOCK)
        self.messages = 0

    def field(self):
        return f"{CLIENT}:{threading.get_ident()}"

    def try_once(self):
        """None when held, else the lock's PTTL in ms."""
        return self.lock_script(keys=[self.name], args=[LEASE_MS, self.field()])

    def lock(self, timeout=60.0):
        deadline = time.monotonic() + timeout
        ttl = self.try_once()
        if ttl is None:
            return
        ps = self.r.pubsub(ignore_subscribe_messages=True)
        ps.subscribe(self.channel)
        try:
            while True:
                ttl = self.try_once()
                if ttl is None:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    sys.exit(f"redisson peer: {self.name} not obtained")
                wait = left if ttl < 0 else min(ttl / 1000.0, left)
                if ps.get_message(timeout=wait) is not None:
                    self.messages += 1
        finally:
            ps.close()

    def unlock(self):
        latch = prefix_name("redisson_unlock_latch", self.name) + ":" + uuid.uuid4().hex
        res = self.unlock_script(
            keys=[self.name, self.channel, latch],
            args=[0, LEASE_MS, self.field(), "PUBLISH", 10000],
        )
        self.r.delete(latch)
        if res is None:
            sys.exit(f"redisson peer: attempt to unlock {self.name}, not locked by current thread")
        return res


def main():
    r = redis.Redis(unix_socket_path=sys.argv[1])
    mode = sys.argv[2]
    if mode == "work":
        d, ident, runs = sys.argv[3], sys.argv[4], int(sys.argv[5])
        lock = RLock(r, "counter")
        for _ in range(runs):
            lock.lock()
            try:
                subprocess.run([d + "/section.sh", d, ident], check=True)
            finally:
                lock.unlock()
    elif mode == "hold":
        lock = RLock(r, sys.argv[3])
        count, seconds = int(sys.argv[4]), float(sys.argv[5])
        for _ in range(count):
            lock.lock()
        print("held", flush=True)
        for i in range(count):
            time.sleep(seconds)
            # Said before the unlock: nobody can take the lock before.
            print(f"unlocking {i + 1}", flush=True)
            print(f"unlocked {lock.unlock()}", flush=True)
    elif mode == "wait":
        lock = RLock(r, sys.argv[3])
        t0 = time.monotonic()
        lock.lock()
        print(f"{time.monotonic() - t0:.3f} {lock.messages}", flush=True)
        lock.unlock()
    else:
        sys.exit("usage: redisson_peer.py SOCKET work|hold|wait ...")


if __name__ == "__main__":
    main()
