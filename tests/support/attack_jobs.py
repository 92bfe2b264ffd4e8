"""Programs of hostile jobs, for ``python -c``: escaping the job, forking without end, and
printing without end. Standard library only (jobs may run a Python other than the tests')."""

from __future__ import annotations

# Starts a setsid child and a double-forked daemon, prints "pids <child> <daemon>", then waits
# ($HOLD=1) or exits at once. Neither child is in the job's process group.
ESCAPES = r"""
import os, subprocess, sys, time
work = os.environ["GPUPOOL_JOB_WORKDIR"]
child = subprocess.Popen(["setsid", "sleep", "600"])
first = os.fork()
if first == 0:
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    with open(os.path.join(work, "daemon.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.path.join(work, "daemon.tmp"), os.path.join(work, "daemon.pid"))
    os.execvp("sleep", ["sleep", "600"])
os.waitpid(first, 0)
while not os.path.exists(os.path.join(work, "daemon.pid")):
    time.sleep(0.01)
print("pids", child.pid, open(os.path.join(work, "daemon.pid")).read(), flush=True)
if os.environ.get("HOLD"):
    time.sleep(600)
"""

# Tries to start 5,000 sleeping processes; stops at the first the kernel refuses.
FORK_BOMB = r"""
import os
spawned = 0
for _ in range(5000):
    try:
        os.posix_spawnp("sleep", ["sleep", "600"], os.environ)
    except OSError as exc:
        print("refused", exc.errno, flush=True)
        break
    spawned += 1
print("spawned", spawned, flush=True)
"""

# Prints 50 MB of 1,000-byte lines, then one line on stderr saying it is still running.
CHATTY = r"""
import sys
line = b"x" * 999 + b"\n"
for _ in range(50_000):  # 50 MB
    sys.stdout.buffer.write(line)
sys.stdout.flush()
print("the job went on after its log was full", file=sys.stderr, flush=True)
"""
