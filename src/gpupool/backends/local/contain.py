"""Containment of one job's process tree: a per-attempt cgroup where one is usable, else the
runner as the tree's subreaper.

A process group is not a boundary: ``setsid`` or a double fork leaves it, and nothing limits
how many processes a job starts. Two mechanisms close that, and the runner uses the best one
the host offers:

* **cgroup** (the runner is root and a pids controller is mounted): the runner makes
  ``<hierarchy>/gpupool/<key>.<runner pid>``, sets ``pids.max`` (the per-job process limit),
  and the job's first process moves itself in between ``fork`` and ``exec``
  (:meth:`Cgroup.enter`, before it drops root and before it can fork), so every descendant is
  born inside. A job cannot leave it: moving a process needs write access to another cgroup's
  ``cgroup.procs``, which only root has. cgroup v2 is used when its pids controller is
  available at the mount's root; else cgroup v1's pids hierarchy, below the runner's own
  cgroup there (so a service manager's limits still cover all jobs).
* **subreaper** (always, as well): the runner sets ``PR_SET_CHILD_SUBREAPER``, so orphaned
  descendants (a daemon's intermediate parent exits) re-parent to the runner instead of init.
  Without a cgroup the tree is found by walking ``/proc`` parent links from the runner, and
  the process limit falls back to ``RLIMIT_NPROC``, which the kernel counts per uid, not per
  job (and ignores for root).

Invariants: :func:`kill_all` returns only when no member is left (or it gives up after its
deadline, saying so); a cgroup is removed only when empty; only processes of this attempt's
tree are ever signalled (cgroup members, or descendants of the runner). Threads count as
processes for both ``pids.max`` and ``RLIMIT_NPROC``.

Only the stdlib: the runner imports this module at start.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple

PARENT = "gpupool"  # the directory, in a hierarchy, that holds the attempts' cgroups
MOUNTINFO = "/proc/self/mountinfo"
SELF_CGROUP = "/proc/self/cgroup"
PR_SET_CHILD_SUBREAPER = 36
KILL_TICK_S = 0.01


class Hierarchy(NamedTuple):
    """Where this process may make per-job cgroups: ``base`` is ``.../gpupool``."""

    version: int  # 1 or 2
    base: str


class Cgroup(NamedTuple):
    version: int
    path: str

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def enter(self) -> None:
        """Move the calling process in (the job's first process, before ``exec``)."""
        with open(self._file("cgroup.procs"), "w", encoding="ascii") as f:
            f.write(str(os.getpid()))

    def members(self) -> list[int]:
        try:
            with open(self._file("cgroup.procs"), encoding="ascii") as f:
                return [int(line) for line in f.read().split()]
        except FileNotFoundError:
            return []

    def signal(self, sig: int) -> None:
        signal_each(self.members(), sig)

    def kill_all(self) -> None:
        # v2 since Linux 5.14 kills the whole cgroup in one step, forks in flight included.
        if self.version == 2:
            with (
                contextlib.suppress(OSError),
                open(self._file("cgroup.kill"), "w", encoding="ascii") as f,
            ):
                f.write("1")
        self.signal(signal.SIGKILL)

    def remove(self) -> bool:
        try:
            os.rmdir(self.path)
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno == errno.EBUSY:  # a member not yet fully gone
                return False
            raise
        return True


def find_hierarchy(mountinfo: str = MOUNTINFO, self_cgroup: str = SELF_CGROUP) -> Hierarchy | None:
    """The best hierarchy with a pids controller this process could use, without touching it
    (whether it may write there is found out by :func:`create`)."""
    try:
        with open(mountinfo, encoding="utf-8") as f:
            mounts = f.read().splitlines()
        with open(self_cgroup, encoding="utf-8") as f:
            own = f.read().splitlines()
    except OSError:
        return None
    v1: Hierarchy | None = None
    for line in mounts:
        pre, sep, post = line.partition(" - ")
        fields, tail = pre.split(), post.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        root, point, fstype, options = fields[3], _unescape(fields[4]), tail[0], tail[2]
        if fstype == "cgroup2" and _has_pids_v2(point):
            return Hierarchy(2, os.path.join(point, PARENT))
        if fstype == "cgroup" and v1 is None and "pids" in options.split(","):
            path = _own_path(own, "pids", root)
            if path is not None:
                v1 = Hierarchy(1, os.path.join(point + path.rstrip("/"), PARENT))
    return v1


def create(hierarchy: Hierarchy, name: str, max_processes: int | None) -> Cgroup:
    """Make (or take over, if left by a dead runner) the cgroup ``name`` with its limit."""
    os.makedirs(hierarchy.base, mode=0o755, exist_ok=True)
    if hierarchy.version == 2:
        # Controllers must be enabled on the way down: at the mount's root and in gpupool/.
        _enable_pids(os.path.dirname(hierarchy.base))
        _enable_pids(hierarchy.base)
    group = Cgroup(hierarchy.version, os.path.join(hierarchy.base, name))
    with contextlib.suppress(FileExistsError):
        os.mkdir(group.path, 0o755)
    if max_processes is not None:
        with open(os.path.join(group.path, "pids.max"), "w", encoding="ascii") as f:
            f.write(str(max_processes))
    return group


def set_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process; whether the kernel agreed."""
    try:
        import ctypes  # only here: a few milliseconds the runner pays once

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):  # not Linux
        return False


def descendants(root: int) -> list[int]:
    """Every live process below ``root`` (by parent links in /proc), zombies excluded."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def kill_all(
    members: Callable[[], list[int]],
    kill: Callable[[], None],
    reap: Callable[[], None],
    timeout_s: float = 10.0,
) -> bool:
    """SIGKILL until ``members()`` is empty, reaping as it goes; whether it got there.

    A process killed while forking may leave a child that was not listed yet: the loop sees it
    on the next round. Killed processes cannot fork, so the rounds end.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        reap()
        if not members():
            return True
        if time.monotonic() > deadline:
            return False
        kill()
        time.sleep(KILL_TICK_S)


def signal_each(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):  # gone meanwhile
            os.kill(pid, sig)


def _has_pids_v2(point: str) -> bool:
    try:
        with open(os.path.join(point, "cgroup.controllers"), encoding="ascii") as f:
            return "pids" in f.read().split()
    except OSError:
        return False


def _enable_pids(path: str) -> None:
    control = os.path.join(path, "cgroup.subtree_control")
    with open(control, encoding="ascii") as f:
        if "pids" in f.read().split():
            return
    with open(control, "w", encoding="ascii") as f:
        f.write("+pids")


def _own_path(lines: list[str], controller: str, mount_root: str) -> str | None:
    """This process's cgroup in the v1 hierarchy of ``controller``, relative to the mount."""
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            path = parts[2]
            if mount_root != "/" and path.startswith(mount_root):
                path = path[len(mount_root) :] or "/"
            return path if path.startswith("/") else None
    return None


def _unescape(path: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal (\040 ...).
    return path.encode().decode("unicode_escape") if "\\" in path else path
