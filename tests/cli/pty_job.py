#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
"""rlock run as a job of an interactive shell in a pseudo-terminal.

    pty_job.py RLOCK DIR     (RLOCK_URL names the server)

1. ^Z stops COMMAND and rlock run as one job: the shell prints its prompt
   again and `jobs` says Stopped; the lock is still held; `fg` lets
   COMMAND go on; ^C then ends it (exit 130).
2. A job stopped longer than its lease: the keeper ends COMMAND's tree by
   the lease's end, and `fg` then reports the loss (exit 79).
Exits 0 when all of it holds, 1 (saying what did not) otherwise.
"""
import os
import pty
import select
import sys
import time

RLOCK, DIR = sys.argv[1], sys.argv[2]
PROMPT = "PTYJOB> "


def fail(msg, out=""):
    sys.stderr.write("pty_job: %s\n--- terminal ---\n%s\n" % (msg, out[-2000:]))
    sys.exit(1)


class Shell:
    def __init__(self, env):
        pid, fd = pty.fork()
        if pid == 0:
            os.execvpe("bash", ["bash", "--norc", "--noprofile", "-i"], env)
        self.pid, self.fd, self.out = pid, fd, ""

    def read(self, until, timeout):
        """Reads until `until` is in what came since the mark, or timeout."""
        end = time.time() + timeout
        while until not in self.out[self.mark:]:
            left = end - time.time()
            if left <= 0:
                return False
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                try:
                    data = os.read(self.fd, 4096)
                except OSError:
                    return False
                self.out += data.decode("utf-8", "replace")
        return True

    def send(self, text):
        self.mark = len(self.out)
        os.write(self.fd, text.encode())

    def expect(self, text, timeout, what):
        if not self.read(text, timeout):
            fail("%s: no %r within %s s" % (what, text, timeout), self.out)


def pid_state(path):
    try:
        pid = int(open(path).read().split()[0])
        stat = open("/proc/%d/stat" % pid).read()
        return pid, stat[stat.rindex(")") + 2]
    except (OSError, ValueError, IndexError):
        return None, None


def count(path):
    try:
        return int(open(path).read().strip() or 0)
    except (OSError, ValueError):
        return 0


def held(name):
    r = os.popen("'%s' status %s" % (RLOCK, name)).read()
    return "held by" in r


def run(sh, name, lease):
    pidf, cntf = os.path.join(DIR, name + ".pid"), os.path.join(DIR, name + ".n")
    for f in (pidf, cntf):
        if os.path.exists(f):
            os.unlink(f)
    cmd = ("RLOCK_WATCHDOG_LEASE=%s '%s' run %s -- sh -c "
           "'echo $$ > %s; i=0; while :; do i=$((i+1)); echo $i > %s; "
           "sleep 0.05; done'\n" % (lease, RLOCK, name, pidf, cntf))
    sh.send(cmd)
    end = time.time() + 10
    while count(cntf) < 3:
        if time.time() > end:
            fail("%s: COMMAND did not start" % name, sh.out)
        time.sleep(0.02)
    return pidf, cntf


def main():
    env = dict(os.environ)
    env["PS1"] = PROMPT
    env["TERM"] = "dumb"
    sh = Shell(env)
    sh.mark = 0
    sh.expect(PROMPT, 10, "bash's first prompt")

    # 1. ^Z, jobs, fg, ^C.
    pidf, cntf = run(sh, "ztest", "30s")
    sh.send("\x1a")
    sh.expect(PROMPT, 5, "the prompt after ^Z")
    if "Stopped" not in sh.out[sh.mark:]:
        fail("the shell did not say the job stopped", sh.out)
    pid, state = pid_state(pidf)
    if state != "T":
        fail("COMMAND (%s) is in state %s after ^Z, not stopped" % (pid, state),
             sh.out)
    n = count(cntf)
    time.sleep(0.5)
    if count(cntf) != n:
        fail("COMMAND went on while the job was stopped", sh.out)
    if not held("ztest"):
        fail("the lock was not held while the job was stopped", sh.out)
    sh.send("jobs\n")
    sh.expect("Stopped", 5, "jobs")
    sh.expect(PROMPT, 5, "the prompt after jobs")
    sh.send("fg\n")
    end = time.time() + 5
    while count(cntf) <= n + 2:
        if time.time() > end:
            fail("COMMAND did not go on after fg", sh.out)
        time.sleep(0.02)
    sh.send("\x03")
    sh.expect(PROMPT, 15, "the prompt after ^C")
    sh.send("echo rc=$?\n")
    sh.expect("rc=130", 5, "rlock run's status after ^C")
    if held("ztest"):
        fail("the lock is still held after ^C", sh.out)

    # 2. Stopped past the lease: the keeper ends the tree; fg says lost.
    pidf, cntf = run(sh, "zlease", "1500ms")
    pid, _ = pid_state(pidf)
    sh.send("\x1a")
    sh.expect(PROMPT, 5, "the prompt after ^Z (short lease)")
    end = time.time() + 10
    while os.path.exists("/proc/%d" % pid) and pid_state(pidf)[1] not in (None, "Z"):
        if time.time() > end:
            fail("COMMAND outlived the lease of its stopped job", sh.out)
        time.sleep(0.05)
    sh.send("fg\n")
    sh.expect(PROMPT, 15, "the prompt after fg of a job whose lease ended")
    sh.send("echo rc=$?\n")
    sh.expect("rc=79", 5, "rlock run's status after its lease ran out")
    sh.send("exit\n")
    os.waitpid(sh.pid, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
