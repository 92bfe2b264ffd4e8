"""The local backend: every attempt is a real process tree on this machine (X2, X3, D3).

Each attempt owns ``<state_dir>/local/<pool>/<key>/`` and a detached runner process
(:mod:`gpupool.backends.local.runner`) that supervises the job and records its end there.

Invariants:

* **One run per key, forever.** ``os.mkdir`` of the attempt dir is the claim: exactly one
  ``submit`` can create it, in this process or any other, before or after a crash. A submit
  that finds the dir returns the existing attempt's handle and starts nothing.
* **Jobs outlive the control plane.** Runners are detached (new session, re-parented to init);
  the adapter holds no state that a restart would lose. A new instance over the same
  ``state_dir`` polls, cancels and reads the logs of handles made by an old one.
* **Never signal a stranger.** Processes are identified by ``(pid, create_time)``; see
  :mod:`gpupool.backends.local.process`.
* Only the scheduler picks GPUs: ``spec.devices[0]`` is translated by :mod:`.gpus`, never
  chosen here.

The state mapping is in ``README.md`` next to this file.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpupool.backends.base import (
    FINAL_STATES,
    AdapterContext,
    BackendStatus,
    Capability,
    JobHandle,
    JobSpec,
    LogChunk,
    PosixIdentity,
    RunState,
    contract_env,
)
from gpupool.backends.errors import BackendError, BackendMisconfigured, BackendRejected
from gpupool.backends.local import contain, container
from gpupool.backends.local.errors import map_local_errors
from gpupool.backends.local.gpus import GpuMapper, gpus_from_options
from gpupool.backends.local.options import DEFAULT_PATH, LocalOptions
from gpupool.backends.local.process import (
    Launcher,
    ProcessId,
    is_alive,
    launch_runner,
    signal_group,
    signal_process,
)
from gpupool.backends.local.runner import (
    CANCEL,
    EXIT,
    HANDLE,
    INPUTS,
    JOB,
    OUTPUT,
    OUTPUTS,
    RUNNER_LOG,
    SPEC,
    WORK,
    events_file,
    read_json,
    remove_container,
    write_atomic,
    write_json_atomic,
)
from gpupool.backends.local.spawner import Spawner
from gpupool.backends.validation import check_spec

LOG_CHUNK_MAX = 1 << 20  # bytes per logs() call
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")  # becomes a directory name
_HANDLE_WAIT_FIRST_S = 0.001  # doubling up to the last: a forked runner answers in ms
_HANDLE_WAIT_MAX_S = 0.02
_EVENTS_TICK_S = 0.005  # how often a waiting poll looks at the events file
_EVENTS_MAX = 1 << 20
# What the container runtime (run as root by the runner) may take from the server's
# environment: its own configuration, nothing of the job's.
_RUNTIME_ENV = (
    "PATH",
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "CONTAINERS_REGISTRIES_CONF",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
)
_REATTACH_MAX = 3  # runners started again for one container attempt, at most
_REATTACHED = "reattached"  # how many times, in the attempt dir
_REATTACH_WAIT_S = 5.0  # for the runner started last to take over before another is started


class LocalBackend:
    name = "local"

    def __init__(
        self,
        ctx: AdapterContext,
        *,
        launcher: Launcher | None = None,
        gpus: GpuMapper | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not _SAFE_NAME.match(ctx.pool):
            raise BackendMisconfigured(f"pool name {ctx.pool!r} cannot be used as a directory")
        self.ctx = ctx
        self.options = LocalOptions.parse(ctx.options)
        self.root = Path(ctx.state_dir).absolute() / "local" / ctx.pool
        # Runners are forked by a pre-imported helper (spawner.py), else started as a new
        # interpreter each.
        self._launcher = launcher or Spawner(self.root.parent, launch_runner)
        self._gpus = gpus if gpus is not None else gpus_from_options(ctx.options, ctx.gpus_per_node)
        self._clock = clock  # wall clock: compared with file modification times
        self._reported_running: set[str] = set()  # keys the last poll reported RUNNING
        # Switching users needs root; without it every job runs as the server's user.
        self._switch_users = os.geteuid() == 0
        if self.options.cgroups == "required" and not self._switch_users:
            raise BackendMisconfigured(
                "local pool option cgroups: required needs the server to run as root "
                "(or set cgroups: auto to contain jobs by subreaper without it)"
            )
        if self.options.cgroups == "required" and contain.find_hierarchy() is None:
            raise BackendMisconfigured(
                "local pool option cgroups: required, but no cgroup hierarchy with a pids "
                "controller is mounted (mount one, or set cgroups: auto)"
            )
        caps = {Capability.LOG_STREAM}
        if self._switch_users:
            caps.add(Capability.POSIX_IDENTITY)
        self.capabilities = frozenset(caps)

    def close(self) -> None:
        """Nothing to release: all state is in files and in detached processes."""

    # -- submit ------------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> JobHandle:
        self._validate(spec)
        attempt = self.root / spec.key
        with map_local_errors("claim an attempt directory"):
            self._make_root()
            try:
                os.mkdir(attempt)
            except FileExistsError:
                return self._await_handle(spec.key, attempt)  # submitted before: no second run
        try:
            with map_local_errors("prepare the attempt"):
                self._prepare(spec, attempt)
                self._launcher(attempt)
        except BackendError:
            # No runner was started for this claim (a launcher raises only then), so releasing
            # it is safe and lets the retry start cleanly.
            shutil.rmtree(attempt, ignore_errors=True)
            raise
        with map_local_errors("read the runner's handle"):
            return self._await_handle(spec.key, attempt)

    def _validate(self, spec: JobSpec) -> None:
        check_spec(spec, self.ctx.pool)
        if spec.nodes != 1 or len(spec.devices) > 1:
            raise BackendRejected(
                f"local pools run single-node jobs only; this job asks for {spec.nodes} nodes "
                "(use a pool whose backend runs multi-node jobs: slurm, ray, kubernetes)"
            )
        if spec.image:
            container.check_image(spec, self.ctx.container, self.ctx.container.allowed_images)
        if not _SAFE_NAME.match(spec.key):
            raise BackendRejected(f"attempt key {spec.key!r} cannot be used as a directory")
        devices = spec.devices[0] if spec.devices else ()
        if len(devices) != spec.gpus_per_node or len(set(devices)) != len(devices):
            raise BackendRejected(
                f"the job asks for {spec.gpus_per_node} GPUs but was given devices "
                f"{list(devices)}: the scheduler must assign one distinct device per GPU"
            )
        limit = self.ctx.gpus_per_node
        if any(d < 0 or (limit and d >= limit) for d in devices):
            raise BackendRejected(f"devices {list(devices)} are not all in 0..{limit - 1}")
        if self._switch_users and spec.posix is None and not self.options.run_without_identity:
            # The server is root: a job without its user's uid would run as root.
            raise BackendRejected(
                f"user {spec.user!r} has no POSIX identity (uid, gid) in the configuration, "
                "and a local pool never runs a job as root: add them under users:"
            )
        if self._switch_users and spec.posix is not None and 0 in (spec.posix.uid, spec.posix.gid):
            # uid or gid 0 in users: would hand a tenant's job root's identity.
            raise BackendRejected(
                f"user {spec.user!r} has uid or gid 0 in the configuration, and a local pool "
                "never runs a job as root: give them their own uid and gid under users:"
            )

    def _make_root(self) -> None:
        self.root.mkdir(mode=0o711, parents=True, exist_ok=True)
        # Jobs of other uids must traverse to their work dirs, but not list attempts.
        for d in (self.root.parent, self.root):
            os.chmod(d, 0o711)

    def _identity(self, spec: JobSpec) -> PosixIdentity | None:
        return spec.posix if self._switch_users else None

    def _prepare(self, spec: JobSpec, attempt: Path) -> None:
        # Layout: the attempt dir and the runner's files (0600) belong to the server: a job
        # can neither forge its own exit.json nor read another's spec. work/inputs/outputs
        # belong to the job. output.log is written by the runner from the job's pipe, so the
        # job cannot bypass the log cap by writing the file itself.
        os.chmod(attempt, 0o711)
        work, inputs, outputs = attempt / WORK, attempt / INPUTS, attempt / OUTPUTS
        for d in (work, inputs, outputs):
            d.mkdir(mode=0o700)
        os.close(os.open(attempt / OUTPUT, os.O_WRONLY | os.O_CREAT, 0o600))
        identity = self._identity(spec)
        if identity is not None:
            for path in (work, inputs, outputs):
                os.chown(path, identity.uid, identity.gid)
        env = self._environment(spec, work, inputs, outputs, identity)
        payload: dict[str, Any] = {
            "argv": list(spec.command),
            "env": env,
            "cwd": str(work),
            "max_runtime_s": spec.max_runtime_s,
            "max_runtime_grace_s": self.options.max_runtime_grace_s,
            "cancel_grace_s": self.options.cancel_grace_s,
            "devices": list(spec.devices[0]) if spec.devices else [],
            "uid": identity.uid if identity else None,
            "gid": identity.gid if identity else None,
            "groups": list(identity.groups) if identity else [],
            "max_processes": self.options.max_processes,
            "max_log_bytes": self.options.max_log_bytes,
            "cgroups": self.options.cgroups,
        }
        if spec.image:
            payload.update(self._container_payload(spec, attempt, identity, env))
        # 0600: the user's env may hold secrets, and the file name is well known.
        write_json_atomic(attempt / SPEC, payload, mode=0o600)

    def _container_payload(
        self, spec: JobSpec, attempt: Path, identity: PosixIdentity | None, env: dict[str, str]
    ) -> dict[str, Any]:
        """The runner runs the container's wrapper as root (the runtime needs it; the job runs
        as ``--user``), with no process limit of its own (the container has ``--pids-limit``)
        and only the runtime's variables (the job's go through the env file)."""
        policy = self.ctx.container
        runtime = policy.runtime or "podman"
        gpus = self._gpus.environment(spec.devices[0] if spec.devices else ())
        host_gpus = [g for g in gpus.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
        template = self.options.gpu_device_files
        if template is None and self.options.devices == "nvidia":
            template = "/dev/nvidia{index}"
        job_env = {k: v for k, v in env.items() if k not in self.options.inherit_env}
        job_env.update({k: v for k, v in spec.env.items()})  # the user's PATH, LANG, if any
        job_env.pop("CUDA_VISIBLE_DEVICES", None)
        made = container.plan(
            spec,
            policy,
            binary=self.options.container_binary or runtime,
            attempt=attempt,
            identity=identity,
            env=job_env,
            gpus=host_gpus,
            gpu_mode=self.options.container_gpus,
            device_template=template,
            max_processes=self.options.max_processes,
        )
        write_atomic(attempt / container.ENV_FILE, container.env_file_text(made.env).encode())
        runtime_env = {k: os.environ[k] for k in _RUNTIME_ENV if k in os.environ}
        runtime_env.setdefault("PATH", DEFAULT_PATH)
        return {
            "argv": list(made.argv),
            "env": runtime_env,
            "cwd": str(attempt),
            "uid": None,
            "gid": None,
            "groups": [],
            "max_processes": None,
            "container": {"binary": made.binary, "name": made.name, "mode_at": container.MODE_AT},
        }

    def _environment(
        self,
        spec: JobSpec,
        work: Path,
        inputs: Path,
        outputs: Path,
        identity: PosixIdentity | None,
    ) -> dict[str, str]:
        env = {k: os.environ[k] for k in self.options.inherit_env if k in os.environ}
        env.setdefault("PATH", DEFAULT_PATH)
        env["HOME"] = _home(identity, work)
        env.update(contract_env(spec, str(work), str(inputs), str(outputs)))
        env.update(self._gpus.environment(spec.devices[0] if spec.devices else ()))
        return env

    def find(self, key: str) -> JobHandle | None:
        """The attempt submitted under ``key``, if its directory was claimed (``Finder``)."""
        if not _SAFE_NAME.match(key):
            raise BackendRejected(f"attempt key {key!r} cannot be used as a directory")
        attempt = self.root / key
        with map_local_errors("look up an attempt"):
            if not attempt.is_dir():
                return None
            return self._handle(key, attempt, ProcessId.from_mapping(read_json(attempt / HANDLE)))

    def _await_handle(self, key: str, attempt: Path) -> JobHandle:
        deadline = time.monotonic() + self.options.launch_timeout_s
        tick = _HANDLE_WAIT_FIRST_S
        while True:
            runner = ProcessId.from_mapping(read_json(attempt / HANDLE))
            if runner is not None or time.monotonic() >= deadline:
                # Without a runner yet the handle carries only the dir: poll() reads the
                # runner from the dir later, or reports LOST once it is clearly never coming.
                return self._handle(key, attempt, runner)
            time.sleep(tick)
            tick = min(2 * tick, _HANDLE_WAIT_MAX_S)

    def _handle(self, key: str, attempt: Path, runner: ProcessId | None) -> JobHandle:
        data = {"dir": str(attempt)}
        if runner is not None:
            data.update(pid=str(runner.pid), create_time=repr(runner.create_time))
        return JobHandle(
            backend=self.name,
            pool=self.ctx.pool,
            provider_id=str(runner.pid) if runner else "",
            key=key,
            data=data,
        )

    # -- poll, logs, cancel -----------------------------------------------------------------

    def poll(self, handles: Sequence[JobHandle]) -> Mapping[str, BackendStatus]:
        """Status per key. With nothing new to report (every attempt running, and reported
        running by this adapter's previous poll) it waits up to ``poll_wait_s`` for a runner
        to announce a start or an end (``events_file``), then reads again: the caller hears of an
        end (and frees its GPUs) within milliseconds, not at its next poll."""
        mark = self._events_mark()
        statuses = self._read(handles)
        running = {k for k, s in statuses.items() if s.state is RunState.RUNNING}
        quiet = len(running) == len(statuses) and running <= self._reported_running
        self._reported_running = running
        if not statuses or not quiet or self.options.poll_wait_s <= 0:
            return statuses
        deadline = time.monotonic() + self.options.poll_wait_s
        while time.monotonic() < deadline and self._events_mark() == mark:
            time.sleep(_EVENTS_TICK_S)
        statuses = self._read(handles)
        self._reported_running = {k for k, s in statuses.items() if s.state is RunState.RUNNING}
        return statuses

    def _read(self, handles: Sequence[JobHandle]) -> dict[str, BackendStatus]:
        statuses = {}
        for handle in handles:
            attempt = self._attempt_dir(handle)
            with map_local_errors("read an attempt's state"):
                statuses[handle.key] = self._status(handle, attempt)
        return statuses

    def _events_mark(self) -> int:
        """The size of the pool's events file (-1: none yet); emptied when it grows past
        ``_EVENTS_MAX`` (an emptied file is a change too, for a poll waiting meanwhile)."""
        path = events_file(self.root)
        try:
            size = os.stat(path).st_size
            if size > _EVENTS_MAX:
                os.truncate(path, 0)
                size = 0
        except OSError:
            return -1
        return size

    def _status(self, handle: JobHandle, attempt: Path) -> BackendStatus:
        if not attempt.is_dir():
            return BackendStatus(RunState.LOST, message=f"attempt directory {attempt} is gone")
        done = read_json(attempt / EXIT)
        if done is not None:
            return _final_status(done)
        runner = _runner_of(handle, attempt)
        if runner is None:
            if self._clock() - attempt.stat().st_mtime < self.options.startup_timeout_s:
                return BackendStatus(RunState.PENDING, message="runner starting")
            return BackendStatus(RunState.LOST, message=_with_log("runner never started", attempt))
        if is_alive(runner):
            return BackendStatus(RunState.RUNNING)
        done = read_json(attempt / EXIT)  # it may have finished between the two reads
        if done is not None:
            return _final_status(done)
        if self._reattach(attempt):
            return BackendStatus(RunState.RUNNING, message="re-attaching to its container")
        return BackendStatus(RunState.LOST, message=_with_log("runner process is gone", attempt))

    def _reattach(self, attempt: Path) -> bool:
        """A container outlives its runner: start a runner again, which finds the container by
        its name and follows it (never a second container). The runner's lock makes a second
        concurrent re-attach a no-op; at most ``_REATTACH_MAX`` per attempt."""
        spec = read_json(attempt / SPEC) or {}
        if not isinstance(spec.get("container"), dict):
            return False
        count_file = attempt / _REATTACHED
        try:
            count = int(count_file.read_text() or 0)
        except (OSError, ValueError):
            count = 0
        if count >= _REATTACH_MAX:
            return False
        if count and self._clock() - count_file.stat().st_mtime < _REATTACH_WAIT_S:
            return True  # the runner started last is still coming up
        write_atomic(count_file, f"{count + 1}\n".encode())
        try:
            self._launcher(attempt)
        except BackendError:
            return False
        return True

    def logs(self, handle: JobHandle, offset: int = 0) -> LogChunk:
        attempt = self._attempt_dir(handle)
        offset = max(0, offset)
        with map_local_errors("read logs"):
            # Decide "final" before reading: output written before the end is then all there.
            final = self._status(handle, attempt).state in FINAL_STATES
            try:
                with open(attempt / OUTPUT, "rb") as f:
                    f.seek(offset)
                    data = f.read(LOG_CHUNK_MAX)
                    size = os.fstat(f.fileno()).st_size
            except FileNotFoundError:
                data, size = b"", 0
        next_offset = offset + len(data)
        return LogChunk(data=data, next_offset=next_offset, complete=final and next_offset >= size)

    def cancel(self, handle: JobHandle, grace_s: float) -> None:
        attempt = self._attempt_dir(handle)
        with map_local_errors("cancel"):
            if not attempt.is_dir() or (attempt / EXIT).exists():
                return  # gone or finished: nothing to stop
            # The file first: a runner that is still starting sees it and never starts the job,
            # and it carries the grace for the SIGTERM below.
            write_atomic(attempt / CANCEL, f"{max(0.0, grace_s):g}\n".encode())
            runner = _runner_of(handle, attempt)
            if runner is not None and signal_process(runner, signal.SIGTERM):
                return
            # The runner is gone (LOST) but its job may live on, orphaned and holding GPUs.
            # Nobody is left to wait out a grace period, so it is killed now: the whole tree
            # through the cgroup the runner recorded, else the leader's process group.
            if (attempt / EXIT).exists():
                return
            job = ProcessId.from_mapping(read_json(attempt / JOB))
            if job is not None:
                signal_group(job, signal.SIGKILL)
            _kill_cgroup(attempt)
            _remove_container(attempt)

    def _attempt_dir(self, handle: JobHandle) -> Path:
        if handle.backend != self.name:
            raise BackendRejected(f"handle of backend {handle.backend!r} given to {self.name!r}")
        if "dir" in handle.data:
            return Path(handle.data["dir"])
        if not _SAFE_NAME.match(handle.key):
            raise BackendRejected(f"attempt key {handle.key!r} cannot be used as a directory")
        return self.root / handle.key


def _runner_of(handle: JobHandle, attempt: Path) -> ProcessId | None:
    # The dir is the truth (the handle may predate handle.json); the handle is the fallback.
    return ProcessId.from_mapping(read_json(attempt / HANDLE)) or ProcessId.from_mapping(
        handle.data
    )


def _kill_cgroup(attempt: Path) -> None:
    """Kill every process in the attempt's cgroup (recorded by its runner) and remove it."""
    recorded = (read_json(attempt / HANDLE) or {}).get("cgroup")
    if not isinstance(recorded, str) or f"/{contain.PARENT}/" not in recorded:
        return  # no cgroup (subreaper containment), or not a path this backend made
    group = contain.Cgroup(2 if (Path(recorded) / "cgroup.kill").exists() else 1, recorded)
    contain.kill_all(group.members, group.kill_all, reap=lambda: None, timeout_s=5.0)
    group.remove()


def _remove_container(attempt: Path) -> None:
    """Remove the attempt's container (a container job whose runner is gone)."""
    found = (read_json(attempt / SPEC) or {}).get("container")
    if isinstance(found, dict):
        remove_container(str(found.get("binary")), str(found.get("name")))


def _final_status(done: Mapping[str, Any]) -> BackendStatus:
    reason = done.get("reason")
    code = done.get("exit_code")
    exit_code = int(code) if isinstance(code, int) else None
    message = str(done.get("message") or "")
    if reason == "exited" and exit_code == 0:
        return BackendStatus(RunState.SUCCEEDED, exit_code=0)
    if reason == "cancelled":
        return BackendStatus(RunState.CANCELLED, exit_code=exit_code, message=message)
    if reason == "runner_error":  # our failure, not the job's: a new attempt may succeed
        return BackendStatus(RunState.LOST, exit_code=exit_code, message=message)
    return BackendStatus(RunState.FAILED, exit_code=exit_code, message=message or str(reason))


def _home(identity: PosixIdentity | None, work: Path) -> str:
    if identity is None:
        return os.environ.get("HOME", str(work))
    try:
        home = pwd.getpwuid(identity.uid).pw_dir
    except KeyError:
        return str(work)
    return home if os.path.isdir(home) else str(work)


def _with_log(message: str, attempt: Path) -> str:
    """Add the last line of runner.log (why a runner died, if it could say)."""
    try:
        lines = (attempt / RUNNER_LOG).read_text(errors="replace").strip().splitlines()
    except OSError:
        return message
    return f"{message}: {lines[-1][:300]}" if lines else message
