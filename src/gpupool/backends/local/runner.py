"""The per-attempt supervisor: ``python -m gpupool.backends.local.runner <attempt_dir>``.

One runner supervises one attempt of the local backend. The adapter starts it in a new
session and it detaches at once (double fork), so that a SIGKILL or exit of the control plane
neither signals nor reaps it: jobs outlive the server, and a restarted server re-attaches by
reading the files below. The runner and the adapter only talk through these files, plus one
SIGTERM from ``cancel()``.

Files in the attempt dir (JSON is written atomically, tmp + ``os.replace``, so a reader never
sees half a file). The runner's files are 0600 and, when the server is root, root's: a job can
neither read them nor forge them.

============  ==========  ==================================================================
file          written by  content
============  ==========  ==================================================================
spec.json     adapter     argv, env, cwd, uid/gid/groups, max_runtime_s, graces, limits
handle.json   runner      ``{pid, create_time[, cgroup]}`` of the runner, written first
job.json      runner      ``{pid, create_time}`` of the job leader
output.log    runner      the job's stdout and stderr, copied from a pipe up to
                          ``max_log_bytes`` (then one ``gpupool: log truncated`` line)
cancel        adapter     grace seconds, written by ``cancel()`` before it signals the runner
exit.json     runner      ``{exit_code, reason, finished_at, message}``, once, at the very end
runner.log    runner      the runner's own stderr: diagnostics if it fails
runner.lock   runner      held (``flock``) while a runner supervises: at most one at a time
container.env adapter     a container job's environment (``--env-file``, see container.py)
reattached    adapter     how often a runner was started again for a container job
============  ==========  ==================================================================

A job from an image (``container`` in spec.json, see :mod:`.container`) is the same to the
runner but for three things: its signals go to the container through the runtime (``kill``),
never to the runtime's client; the container is removed before ``exit.json``; and a runner
started again for an attempt whose job already started (``job.json`` exists: its first runner
died) re-attaches to the container by name, skipping the output ``output.log`` already has.

The job's whole process tree is contained (:mod:`.contain`): in a per-attempt cgroup with a
process limit where the host allows, else below the runner, which is the tree's subreaper.
Signals (cancel, max runtime) go to every process of the tree, not only the leader's group.

Invariants: ``exit.json`` is written at most once and only after every process of the job is
dead and its output copied (so a reader that sees it also sees the complete ``output.log``);
the job never starts if ``cancel`` existed first. ``reason`` is one of exited, cancelled,
max_runtime, signal, start_failed, runner_error. If the runner itself dies, the job's next
write to its output fails (SIGPIPE): an attempt without its runner is LOST anyway, and
``cancel()`` kills what is left through the cgroup recorded in ``handle.json``.

Only the stdlib may be imported at start (the runner starts once per attempt, and its start-up
is part of every job's latency). :func:`create_time` reads the process start time from
``/proc`` exactly as psutil computes it, so the adapter's psutil-based liveness check agrees;
elsewhere psutil is imported only then.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpupool.backends.local import contain

SPEC = "spec.json"
HANDLE = "handle.json"
JOB = "job.json"
EXIT = "exit.json"
CANCEL = "cancel"
OUTPUT = "output.log"
RUNNER_LOG = "runner.log"
LOCK = "runner.lock"
RUNTIME_TIMEOUT_S = 60.0  # one call of the container runtime (kill, rm)


def events_file(pool_dir: Path) -> Path:
    """``<state_dir>/local/.events-<pool>``: one byte appended by each runner of the pool when
    it has written handle.json and when it has written exit.json, so the adapter's poll can
    wait for news by watching one file's size instead of every attempt's files. Beside the
    pool's dir, not in it: that dir holds attempt dirs only."""
    return pool_dir.parent / f".events-{pool_dir.name}"


WORK, INPUTS, OUTPUTS = "work", "inputs", "outputs"

TICK_S = 0.05  # how quickly cancel, max runtime and job exit are noticed
DEFAULT_GRACE_S = 10.0
PIPE_SIZE = 1 << 20  # the job's stdout pipe: fewer wake-ups of the runner for chatty jobs
PUMP_CHUNK = 1 << 20
PUMP_BUDGET = 16 << 20  # bytes copied per tick at most, so cancel and deadlines stay on time
DRAIN_TIMEOUT_S = 5.0  # output still arriving after the tree is dead (a root job's escapee)


def write_atomic(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` so that readers see the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def create_time(pid: int) -> float:
    """Seconds since the epoch at which ``pid`` started, as ``psutil.Process.create_time``.

    Linux: boot time (``btime`` of /proc/stat) plus the start tick of /proc/<pid>/stat over
    the clock rate, the formula psutil uses. Other systems: psutil itself.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime"))
    except FileNotFoundError:
        import psutil  # not Linux: pay for the import only here

        return float(psutil.Process(pid).create_time())
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return float(boot) + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def write_json_atomic(path: Path, data: dict[str, Any], mode: int = 0o600) -> None:
    write_atomic(path, json.dumps(data).encode(), mode)


def read_json(path: Path) -> dict[str, Any] | None:
    """The file's object, or None when it does not exist (yet)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except ValueError:  # cannot happen with write_atomic; a damaged disk reads as "not there"
        return None
    return data if isinstance(data, dict) else None


def read_grace(path: Path, default: float) -> float:
    try:
        return max(0.0, float(path.read_text().strip()))
    except (OSError, ValueError):
        return default


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class LogPump:
    """Copies the job's output from its pipe into ``output.log``, up to ``cap`` bytes.

    Past the cap the rest is read and dropped (the job is not killed for logging more, and
    never blocks on a full pipe), and the log ends with one note saying where it was cut.
    ``splice`` moves the bytes inside the kernel (a chatty job costs the runner little); where
    it is refused, read and write do the same.
    """

    def __init__(self, read_fd: int, path: Path, cap: int | None, skip: int = 0) -> None:
        self.fd = read_fd
        self.skip = skip  # bytes of the stream the log already holds (a re-attached container)
        self.out = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # RDWR: note() reads back
        self.end = os.fstat(self.out).st_size  # where the next byte goes (notes included)
        self.size = 0  # the job's bytes kept, counted against the cap
        self.cap = cap
        self.truncated = False
        self.eof = False
        self.splice = hasattr(os, "splice")

    def pump(self, timeout: float, wake: int | None = None) -> None:
        """Copy what arrives within ``timeout`` (and whatever follows at once, up to a budget
        that keeps the runner's other duties on time). ``wake``: a descriptor whose becoming
        readable (the job's leader exiting, see ``pidfd_open``) ends the wait early."""
        waits = [] if wake is None else [wake]
        if self.eof:
            # Nothing more can come; keep the supervisor's pace, or return when woken.
            if waits:
                select.select(waits, [], [], timeout)
            else:
                time.sleep(timeout)
            return
        budget = PUMP_BUDGET
        ready = select.select([self.fd, *waits], [], [], timeout)[0]
        if self.fd not in ready:
            return
        while ready and budget > 0:
            moved = self._copy()
            if moved == 0:
                self.eof = True
                return
            budget -= moved
            ready = select.select([self.fd], [], [], 0)[0]

    def drain(self, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Copy the rest until every writer is gone (the tree is dead by now)."""
        deadline = time.monotonic() + timeout_s
        while not self.eof and time.monotonic() < deadline:
            self.pump(TICK_S)

    def note(self, line: str) -> None:
        """A line of gpupool's own (not counted against the cap), on a line of its own."""
        newline = self.end == 0 or os.pread(self.out, 1, self.end - 1) == b"\n"
        self._write((b"" if newline else b"\n") + line.encode() + b"\n")

    def close(self) -> None:
        for fd in (self.fd, self.out):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _copy(self) -> int:
        """Move one chunk from the pipe (the pipe is readable); bytes taken, 0 at its end."""
        if self.skip > 0:
            seen = os.read(self.fd, min(self.skip, PUMP_CHUNK))
            self.skip -= len(seen)
            self.size += len(seen)  # counted against the cap: they are in the log already
            return len(seen)
        room = None if self.cap is None else self.cap - self.size
        if room is not None and room <= 0:
            dropped = os.read(self.fd, PUMP_CHUNK)
            if dropped and not self.truncated:
                self.truncated = True
                self.note(f"gpupool: log truncated at {self.cap} bytes")
            return len(dropped)
        want = PUMP_CHUNK if room is None else min(PUMP_CHUNK, room)
        if self.splice:
            try:
                moved = os.splice(self.fd, self.out, want, offset_dst=self.end)
            except OSError:  # this file system or kernel does not splice: copy instead
                self.splice = False
            else:
                self.size += moved
                self.end += moved
                return moved
        data = os.read(self.fd, want)
        self._write(data)
        self.size += len(data)
        return len(data)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(self.out, view, self.end)
            self.end += written
            view = view[written:]


def remove_container(binary: str, name: str) -> bool:
    """``<runtime> rm -f <name>``: stop the container at once and remove it (True: gone)."""
    return _runtime(binary, "rm", "-f", name) or not _runtime(binary, "container", "inspect", name)


def _runtime(binary: str, *args: str) -> bool:
    try:
        done = subprocess.run(
            [binary, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=RUNTIME_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"runner: {binary} {args[0]}: {exc}", file=sys.stderr)
        return False
    return done.returncode == 0


class JobSetup:
    """Runs in the job's first process between ``fork`` and ``exec``, as root: into the cgroup
    first (before it can fork, so nothing is born outside), then the process limit, then the
    user's identity. A failure is written to the job's log, then ends the start."""

    def __init__(
        self, cgroup: contain.Cgroup | None, nproc: int | None, identity: dict[str, Any] | None
    ) -> None:
        self.cgroup, self.nproc, self.identity = cgroup, nproc, identity

    def __call__(self) -> None:
        try:
            if self.cgroup is not None:
                self.cgroup.enter()
            if self.nproc is not None:
                _, hard = resource.getrlimit(resource.RLIMIT_NPROC)
                soft = self.nproc if hard == resource.RLIM_INFINITY else min(self.nproc, hard)
                resource.setrlimit(resource.RLIMIT_NPROC, (soft, hard))
            if self.identity is not None:
                # setgroups([...]) also drops the runner's (root's) supplementary groups.
                os.setgroups(self.identity["groups"])
                os.setgid(self.identity["gid"])
                os.setuid(self.identity["uid"])
        except BaseException as exc:
            os.write(1, f"gpupool: cannot set up the job's process: {exc}\n".encode())
            raise


class Tree:
    """The job's processes: its cgroup's members, else the runner's descendants (the runner is
    their subreaper, so orphans stay below it). Reaps every child the runner gets, keeping the
    leader's status."""

    def __init__(
        self, cgroup: contain.Cgroup | None, container: dict[str, Any] | None = None
    ) -> None:
        self.cgroup = cgroup
        self.container = container  # {binary, name}: the job is that container
        self.runner = os.getpid()
        self.leader = 0
        self.leader_status: int | None = None

    def members(self) -> list[int]:
        if self.cgroup is not None:
            return self.cgroup.members()
        return contain.descendants(self.runner)

    def signal(self, sig: int) -> None:
        if self.container is not None:
            # The container's processes are the runtime's, not below the runner: signalling
            # its client would only stop following the container, not the job.
            name = signal.Signals(sig).name.removeprefix("SIG")
            _runtime(self.container["binary"], "kill", "--signal", name, self.container["name"])
            return
        contain.signal_each(self.members(), sig)

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.leader:
                self.leader_status = os.waitstatus_to_exitcode(status)

    def kill_all(self) -> bool:
        def kill() -> None:
            if self.cgroup is not None:
                self.cgroup.kill_all()
            else:
                self.signal(signal.SIGKILL)

        return contain.kill_all(self.members, kill, self.reap)

    def remove(self) -> None:
        """Kill what is left and remove the cgroup (idempotent); a container job's container
        is removed first."""
        found = self.container
        if found is not None and not remove_container(found["binary"], found["name"]):
            print(f"runner: cannot remove container {self.container['name']}", file=sys.stderr)
        done = self.kill_all()
        if not done:
            print(
                f"runner: processes of the job survived SIGKILL: {self.members()}", file=sys.stderr
            )
        if self.cgroup is not None:
            for _ in range(100):
                if self.cgroup.remove():
                    break
                time.sleep(contain.KILL_TICK_S)
            else:
                print(f"runner: cannot remove cgroup {self.cgroup.path}", file=sys.stderr)


class Runner:
    def __init__(self, attempt: Path) -> None:
        self.dir = attempt
        self.terminate = False

    def _on_term(self, signum: int, frame: object) -> None:
        self.terminate = True

    def _cancel_requested(self) -> bool:
        return self.terminate or (self.dir / CANCEL).exists()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        lock = os.open(self.dir / LOCK, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return 0  # another runner supervises this attempt; it is the one to report
        pid = os.getpid()
        contain.set_subreaper()  # before any child exists: orphans of the job come back here
        spec = read_json(self.dir / SPEC)
        over = (self.dir / EXIT).exists()
        cgroup, problem = (None, None) if spec is None or over else self._cgroup(spec)
        # Install the handler before publishing our pid: a SIGTERM sent by cancel() must never
        # hit the default action and kill the runner without an exit.json. The cgroup is
        # published with it, before any job exists: whoever cancels after a runner crash finds
        # and kills the whole tree through it.
        handle: dict[str, Any] = {"pid": pid, "create_time": create_time(pid)}
        if cgroup is not None:
            handle["cgroup"] = cgroup.path
        write_json_atomic(self.dir / HANDLE, handle)
        self._announce()
        if over:
            return 0
        found = spec.get("container") if spec is not None else None
        tree = Tree(cgroup, found if isinstance(found, dict) else None)
        result: dict[str, Any]
        try:
            if problem is not None:
                result = {"exit_code": None, "reason": "runner_error", "message": problem}
            else:
                result = self._supervise(spec, tree)
        except BaseException as exc:  # report, never die silently: silence would read as LOST
            result = {"exit_code": None, "reason": "runner_error", "message": f"runner: {exc!r}"}
        try:
            tree.remove()  # nothing of the job outlives exit.json (also after a runner error)
        except BaseException as exc:
            print(f"runner: cleaning up the job's processes failed: {exc!r}", file=sys.stderr)
        result["finished_at"] = time.time()
        write_json_atomic(self.dir / EXIT, result)
        self._announce()
        return 0

    def _announce(self) -> None:
        """Tell a waiting poll that this attempt's state changed (best effort: a poll that
        misses it still finds the change when its wait ends)."""
        try:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
            fd = os.open(events_file(self.dir.parent), flags, 0o600)
        except OSError:
            return
        try:
            os.write(fd, b".")
        except OSError:
            pass
        finally:
            os.close(fd)

    def _cgroup(self, spec: dict[str, Any]) -> tuple[contain.Cgroup | None, str | None]:
        """The attempt's cgroup (None: contain by subreaper), or why a required one failed."""
        mode = spec.get("cgroups", "auto")
        if mode == "off":
            return None, None
        hierarchy = contain.find_hierarchy()
        try:
            if hierarchy is None:
                raise OSError("no cgroup hierarchy with a pids controller is mounted")
            limit = spec.get("max_processes")
            name = f"{self.dir.name}.{os.getpid()}"
            return contain.create(hierarchy, name, int(limit) if limit else None), None
        except OSError as exc:
            if mode == "required":
                return None, f"runner: cannot make the job's cgroup (cgroups: required): {exc}"
            if os.geteuid() == 0:  # a root runner is expected to manage; say why it did not
                print(f"runner: no cgroup, containing by subreaper: {exc}", file=sys.stderr)
            return None, None

    def _supervise(self, spec: dict[str, Any] | None, tree: Tree) -> dict[str, Any]:
        if spec is None:
            return {"exit_code": None, "reason": "runner_error", "message": "spec.json missing"}
        # A job started by an earlier runner (that died) is a container to re-attach to.
        container = tree.container
        reattach = container is not None and (self.dir / JOB).exists()
        if self._cancel_requested() and not reattach:
            return {"exit_code": None, "reason": "cancelled", "message": "cancelled before start"}
        read_fd, write_fd = os.pipe()
        with contextlib.suppress(OSError):  # fewer wake-ups for a chatty job; best effort
            fcntl.fcntl(read_fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        limit = spec.get("max_log_bytes")
        skip = 0
        if reattach and container is not None:
            # The wrapper (container.py) then only follows the container, never runs one.
            spec = {**spec, "argv": [*spec["argv"]]}
            spec["argv"][int(container.get("mode_at", 6))] = "attach"
            skip = _log_size(self.dir / OUTPUT)
        pump = LogPump(read_fd, self.dir / OUTPUT, int(limit) if limit else None, skip)
        try:
            try:
                child = self._start(spec, tree, write_fd)
            except (OSError, subprocess.SubprocessError, ValueError) as exc:
                os.close(write_fd)
                pump.drain(1.0)  # what the job's setup could say before it failed
                message = f"cannot start command {spec['argv'][0]!r}: {exc}"
                pump.note(f"gpupool: {message}")
                code = 127 if isinstance(exc, FileNotFoundError) else 126
                return {"exit_code": code, "reason": "start_failed", "message": message}
            os.close(write_fd)
            tree.leader = child.pid
            try:
                job_ct = create_time(child.pid)
            except (OSError, ValueError):
                job_ct = 0.0
            write_json_atomic(self.dir / JOB, {"pid": child.pid, "create_time": job_ct})
            result = self._wait(child, spec, tree, pump)
            # The attempt ends with its leader. Whatever it left (in its cgroup, or below the
            # runner) would keep holding the GPUs it was given, so it goes too; then the rest
            # of the output is copied: exit.json means "nothing left, log complete".
            tree.remove()
            pump.drain()
            return result
        finally:
            pump.close()

    def _start(self, spec: dict[str, Any], tree: Tree, stdout: int) -> subprocess.Popen[bytes]:
        identity: dict[str, Any] | None = None
        if spec.get("uid") is not None:
            identity = {
                "uid": int(spec["uid"]),
                "gid": int(spec["gid"]),
                "groups": [int(g) for g in spec.get("groups", [])],
            }
        # Without a cgroup the limit falls back to RLIMIT_NPROC (per uid, not per job).
        limit = spec.get("max_processes")
        nproc = int(limit) if limit and tree.cgroup is None else None
        return subprocess.Popen(
            list(spec["argv"]),
            cwd=spec["cwd"],
            env=dict(spec["env"]),
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session: no terminal, signals of ours stay ours
            close_fds=True,
            preexec_fn=JobSetup(tree.cgroup, nproc, identity),
        )

    def _wait(
        self, child: subprocess.Popen[bytes], spec: dict[str, Any], tree: Tree, pump: LogPump
    ) -> dict[str, Any]:
        # Readable once the leader has exited: its end is noticed at once, not at the next tick.
        try:
            exited: int | None = os.pidfd_open(child.pid)
        except (AttributeError, OSError):  # not Linux 5.3+: the tick notices it
            exited = None
        try:
            return self._supervise_until_exit(child, spec, tree, pump, exited)
        finally:
            if exited is not None:
                os.close(exited)

    def _supervise_until_exit(
        self,
        child: subprocess.Popen[bytes],
        spec: dict[str, Any],
        tree: Tree,
        pump: LogPump,
        exited: int | None,
    ) -> dict[str, Any]:
        max_runtime = spec.get("max_runtime_s")
        start = time.monotonic()
        deadline = start + float(max_runtime) if max_runtime else None
        cancel_default = float(spec.get("cancel_grace_s", DEFAULT_GRACE_S))
        reason: str | None = None
        grace = 0.0
        kill_at: float | None = None
        while True:
            # Also the loop's pace: it waits for output (or the leader's exit) up to a tick.
            pump.pump(TICK_S, exited)
            tree.reap()
            if tree.leader_status is not None:
                break
            now = time.monotonic()
            if reason is None:
                if self._cancel_requested():
                    reason = "cancelled"
                    grace = read_grace(self.dir / CANCEL, cancel_default)
                elif deadline is not None and now >= deadline:
                    reason = "max_runtime"
                    grace = float(spec.get("max_runtime_grace_s", DEFAULT_GRACE_S))
                if reason is not None:
                    tree.signal(signal.SIGTERM)  # the whole tree, not only the leader's group
                    kill_at = now + grace
            elif kill_at is not None and now >= kill_at:
                tree.signal(signal.SIGKILL)
                kill_at = None
        rc = tree.leader_status
        child.returncode = rc  # reaped here, not by Popen (the runner reaps every orphan)
        exit_code = rc if rc >= 0 else 128 - rc
        if reason == "cancelled":
            message = f"cancelled (grace {grace:g}s)"
        elif reason == "max_runtime":
            message = f"exceeded max_runtime_s={max_runtime}"
        elif rc < 0:
            reason, message = "signal", f"killed by {_signal_name(-rc)}"
        else:
            reason, message = "exited", "" if rc == 0 else f"exited with code {rc}"
        return {"exit_code": exit_code, "reason": reason, "message": message}


def _log_size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m gpupool.backends.local.runner ATTEMPT_DIR", file=sys.stderr)
        return 2
    # Detach: the adapter waits for this parent only; the child is re-parented to init and is
    # not a session leader, so it can never acquire a controlling terminal.
    if os.fork() > 0:
        os._exit(0)
    return Runner(Path(args[0])).run()


if __name__ == "__main__":
    sys.exit(main())
