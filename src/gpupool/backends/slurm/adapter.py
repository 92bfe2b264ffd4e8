"""The Slurm backend: every attempt is one Slurm batch job (docs/architecture.md §6, D3).

Slurm has no client-chosen job ids, so the key is the job's *name* (``gpupool-<key>``, also in
its comment) and the attempt's directory (:mod:`.attempt`) holds what Slurm may forget.

Invariants:

* **One run per key.** ``submit`` holds an exclusive ``flock`` on the attempt dir (across
  threads and processes on this host) while it looks for an earlier job of the key, in this
  order: ``submitted.json`` (our record), ``squeue --name`` (a submit that died before
  recording), ``slurm_job_id`` (written by the job itself, once Slurm has purged it). Only when
  all three come up empty does it run ``sbatch``. Jobs are ``--no-requeue``.
* **Handles outlive the adapter.** A handle is the job id plus the attempt dir; a new instance
  needs nothing else. Slurm purges ended jobs ``MinJobAge`` (default 300 s) after they end;
  from then on the job's own ``exit_code`` file tells the outcome.
* **One squeue per poll** (per 200 handles): jobs are selected by name, which, unlike
  ``--jobs``, does not fail when one of them was purged.
* ``cancel`` never sleeps: SIGTERM now, SIGKILL ``grace_s`` later from a timer thread, and,
  should the process restart before then, from the first ``poll`` that finds it overdue.
* Slurm chooses the GPUs: ``JobSpec.devices`` is ignored, and the job sees Slurm's
  ``CUDA_VISIBLE_DEVICES`` for its gres.

The state mapping is in ``README.md`` next to this file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from gpupool.backends.base import (
    FINAL_STATES,
    AdapterContext,
    BackendStatus,
    Capability,
    JobHandle,
    JobSpec,
    LogChunk,
    PoolCapacity,
    PosixIdentity,
    RunState,
    contract_env,
)
from gpupool.backends.containers import check_image, storage_mounts
from gpupool.backends.errors import BackendRejected
from gpupool.backends.slurm.attempt import AttemptDir
from gpupool.backends.slurm.commands import CommandRunner, SubprocessRunner, run_checked
from gpupool.backends.slurm.container import RUNTIMES, ContainerScript
from gpupool.backends.slurm.errors import map_slurm_errors
from gpupool.backends.slurm.options import SlurmOptions
from gpupool.backends.slurm.parsers import (
    SINFO_FORMAT,
    SQUEUE_FORMAT,
    SlurmCapacity,
    SqueueRow,
    parse_sbatch_parsable,
    parse_sinfo_capacity,
    parse_squeue,
)
from gpupool.backends.slurm.script import ScriptOptions, render_batch_script
from gpupool.backends.slurm.status import PENDING_STATES, job_status
from gpupool.backends.validation import check_spec

LOG_CHUNK_MAX = 1 << 20  # bytes per logs() call
NAMES_PER_SQUEUE = 200  # keeps the command line short; one call covers a typical poll
_SAFE_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")  # a directory and a job name
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

Scheduler = Callable[[float, Callable[[], None]], None]  # run a callback after some seconds


def _timer(delay_s: float, callback: Callable[[], None]) -> None:
    timer = threading.Timer(delay_s, callback)
    timer.daemon = True  # a pending escalation must not keep the server from exiting
    timer.start()


class SlurmBackend:
    name = "slurm"

    def __init__(
        self,
        ctx: AdapterContext,
        *,
        runner: CommandRunner | None = None,
        clock: Callable[[], float] = time.time,
        schedule: Scheduler = _timer,
    ) -> None:
        self.ctx = ctx
        self.options = SlurmOptions.parse(ctx)
        self.root = self.options.workdir_root
        env = {"SLURM_CONF": self.options.slurm_conf} if self.options.slurm_conf else None
        self._runner = runner if runner is not None else SubprocessRunner(env=env)
        self._clock = clock  # wall clock: cancel requests are persisted with it
        self._schedule = schedule
        self._killed: set[str] = set()  # job ids this instance already sent SIGKILL
        # sbatch --uid/--gid are honoured for root only; without root every job is ours.
        self._switch_users = os.geteuid() == 0
        caps = {Capability.GANG, Capability.LOG_STREAM, Capability.CAPACITY}
        if self._switch_users:
            caps.add(Capability.POSIX_IDENTITY)
        self.capabilities = frozenset(caps)

    def _job_name(self, key: str) -> str:
        return f"{self.options.job_name_prefix}{key}"

    def _name_of(self, handle: JobHandle) -> str:
        # The handle's own: the prefix option may have changed since it was submitted.
        return handle.data.get("job_name") or self._job_name(handle.key)

    def close(self) -> None:
        """Nothing to release: the jobs live in Slurm, their records in the attempt dirs."""

    # -- submit ------------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> JobHandle:
        self._validate(spec)
        attempt = AttemptDir(self.root / spec.key)
        with map_slurm_errors("submit a job"):
            self._make_root()
            with _locked(attempt.path):
                found = self._find_job(spec.key, attempt)
                if found is not None:
                    return self._handle(spec, attempt, found)  # submitted before: no second run
                identity = spec.posix if self._switch_users else None
                attempt.prepare(identity)
                job_id = self._sbatch(spec, attempt, identity)
                attempt.record_submitted(job_id, self._job_name(spec.key))
                return self._handle(spec, attempt, job_id)

    def _validate(self, spec: JobSpec) -> None:
        check_spec(spec, self.ctx.pool)
        if spec.image:
            check_image(spec, self.ctx.container, RUNTIMES, "slurm")
            secret = spec.container.pull_secret if spec.container else None
            if secret is not None and self.ctx.container.runtime == "pyxis":
                raise BackendRejected(
                    "pyxis pulls with enroot's own credentials on the nodes "
                    "(enroot's .credentials file); remove image_pull_secret"
                )
        if not _SAFE_KEY.match(spec.key):
            raise BackendRejected(f"attempt key {spec.key!r} cannot be a Slurm job name")
        if spec.nodes < 1 or spec.gpus_per_node < 0:
            raise BackendRejected(f"invalid shape: {spec.nodes} nodes x {spec.gpus_per_node} GPUs")
        bad = sorted(name for name in spec.env if not _ENV_NAME.match(name))
        if bad:
            raise BackendRejected(f"environment variable names not valid in a shell: {bad}")

    def _make_root(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self._switch_users:
            os.chmod(self.root, 0o711)  # jobs of other uids traverse to their attempt dirs

    def _find_job(self, key: str, attempt: AttemptDir) -> str | None:
        record = attempt.submitted()
        if record is not None:
            return str(record["job_id"])
        name = self._job_name(key)
        rows = [r for r in self._squeue([name]) if r.name == name]
        job_id = min((r.job_id for r in rows), key=int, default=None)
        job_id = job_id or attempt.job_id_written_by_job()
        if job_id is not None:
            attempt.record_submitted(job_id, name)
        return job_id

    def find(self, key: str) -> JobHandle | None:
        """The job submitted under ``key``, from its attempt dir or by name (``Finder``)."""
        if not _SAFE_KEY.match(key):
            raise BackendRejected(f"attempt key {key!r} cannot be a Slurm job name")
        attempt = AttemptDir(self.root / key)
        name = self._job_name(key)
        with map_slurm_errors("look up a job"):
            if attempt.path.is_dir():
                with _locked(attempt.path):
                    job_id = self._find_job(key, attempt)
            else:
                rows = [r for r in self._squeue([name]) if r.name == name]
                job_id = min((r.job_id for r in rows), key=int, default=None)
        if job_id is None:
            return None
        data = {"workdir": str(attempt.path), "job_name": name}
        return JobHandle(self.name, self.ctx.pool, job_id, key, data)

    def _sbatch(self, spec: JobSpec, attempt: AttemptDir, identity: PosixIdentity | None) -> str:
        user_env = {k: v for k, v in spec.env.items() if k != "CUDA_VISIBLE_DEVICES"}  # Slurm's
        env = contract_env(
            replace(spec, env=user_env),
            str(attempt.work),
            str(attempt.inputs),
            str(attempt.outputs),
        )
        script = render_batch_script(
            spec,
            env,
            ScriptOptions(
                job_name=self._job_name(spec.key),
                partition=self.options.partition,
                gres_type=self.options.gres_type,
                attempt_dir=str(attempt.path),
                account=self.options.account,
                qos=self.options.qos,
                max_runtime_grace_s=self.options.max_runtime_grace_s,
                container=self._container(spec, attempt, env),
            ),
        )
        argv = ["sbatch", "--parsable"]
        if identity is not None:
            argv += [f"--uid={identity.uid}", f"--gid={identity.gid}"]
        return parse_sbatch_parsable(self._run(argv, input=script))

    def _container(
        self, spec: JobSpec, attempt: AttemptDir, env: Mapping[str, str]
    ) -> ContainerScript | None:
        if spec.image is None:
            return None
        policy = self.ctx.container
        work = str(attempt.work)
        mounts, home = storage_mounts(spec, policy, work)
        own = [(p, p, False) for p in (work, str(attempt.inputs), str(attempt.outputs))]
        secret = spec.container.pull_secret if spec.container else None
        if secret is not None and secret not in policy.pull_secrets:
            raise BackendRejected(f"unknown image_pull_secret {secret!r}")
        return ContainerScript(
            runtime=str(policy.runtime),
            image=spec.image,
            name=self._job_name(spec.key),
            workdir=work,
            home=home,
            mounts=(*own, *mounts),
            env_names=tuple(sorted(env)),
            network=policy.network,
            read_only_root=bool(spec.container and spec.container.read_only_root),
            shm_size_gb=spec.container.shm_size_gb if spec.container else None,
            gpu_mode=self.options.container_gpus,
            device_template=self.options.gpu_device_files,
            authfile=policy.pull_secrets.get(secret) if secret else None,
            binary=self.options.container_binary,
        )

    def _handle(self, spec: JobSpec, attempt: AttemptDir, job_id: str) -> JobHandle:
        data = {"workdir": str(attempt.path), "job_name": self._job_name(spec.key)}
        if spec.max_runtime_s:
            data["max_runtime_s"] = str(spec.max_runtime_s)
        return JobHandle(self.name, self.ctx.pool, job_id, spec.key, data)

    # -- poll --------------------------------------------------------------------------------

    def poll(self, handles: Sequence[JobHandle]) -> Mapping[str, BackendStatus]:
        if not handles:
            return {}
        with map_slurm_errors("poll jobs"):
            names = sorted({self._name_of(h) for h in handles})
            rows = {row.job_id: row for row in self._squeue(names)}
            return {h.key: self._status(h, rows.get(h.provider_id)) for h in handles}

    def _status(self, handle: JobHandle, row: SqueueRow | None) -> BackendStatus:
        attempt = self._attempt(handle)
        cancel = attempt.cancel_request()
        status = job_status(
            row,
            attempt.exit_record(),
            cancel_requested=cancel is not None,
            submitted=attempt.submitted() is not None,
            max_runtime_s=_int(handle.data.get("max_runtime_s")),
        )
        if cancel is not None and row is not None and status.state == RunState.RUNNING:
            self._kill_if_overdue(row.job_id, cancel)  # the timer died with an old process
        return status

    def _squeue(self, names: Sequence[str]) -> list[SqueueRow]:
        rows: list[SqueueRow] = []
        for start in range(0, len(names), NAMES_PER_SQUEUE):
            chunk = ",".join(names[start : start + NAMES_PER_SQUEUE])
            argv = ["squeue", "--noheader", "--states=all", f"--name={chunk}"]
            rows += parse_squeue(self._run([*argv, f"--Format={SQUEUE_FORMAT}"]))
        return rows

    # -- logs, cancel, capacity ----------------------------------------------------------------

    def logs(self, handle: JobHandle, offset: int = 0) -> LogChunk:
        attempt = self._attempt(handle)
        offset = max(0, offset)
        # Decide "final" before reading: output written before the end is then all there.
        final = self.poll([handle])[handle.key].state in FINAL_STATES
        with map_slurm_errors("read logs"):
            try:
                with open(attempt.output_log, "rb") as f:
                    f.seek(offset)
                    data = f.read(LOG_CHUNK_MAX)
                    size = os.fstat(f.fileno()).st_size
            except FileNotFoundError:
                data, size = b"", 0
        next_offset = offset + len(data)
        return LogChunk(data=data, next_offset=next_offset, complete=final and next_offset >= size)

    def cancel(self, handle: JobHandle, grace_s: float) -> None:
        attempt = self._attempt(handle)
        grace_s = max(0.0, grace_s)
        with map_slurm_errors("cancel a job"):
            earlier = attempt.cancel_request()
            rows = {r.job_id: r for r in self._squeue([self._name_of(handle)])}
            row = rows.get(handle.provider_id)
            if earlier is not None:
                if row is not None:
                    self._kill_if_overdue(row.job_id, earlier)
                return  # signalled already; the kill is scheduled (idempotent)
            if row is None or self._status(handle, row).state in FINAL_STATES:
                return  # ended, purged or never submitted: nothing to stop
            # The record first: however the job now ends, poll reports CANCELLED.
            attempt.record_cancel(self._clock(), grace_s)
            job_id = row.job_id
            if row.state in PENDING_STATES:
                self._run(["scancel", job_id])  # never started: nothing to signal
            elif grace_s <= 0:
                self._kill(job_id)
            else:
                # --full: without it Slurm signals job steps only, not the batch script's tree.
                self._run(["scancel", "--full", "--signal=TERM", job_id])
                self._schedule(grace_s, lambda: self._kill(job_id, quiet=True))

    def _kill_if_overdue(self, job_id: str, cancel: Mapping[str, object]) -> None:
        due = float(str(cancel.get("requested_at", 0))) + float(str(cancel.get("grace_s", 0)))
        if job_id not in self._killed and self._clock() >= due:
            self._kill(job_id, quiet=True)

    def _kill(self, job_id: str, quiet: bool = False) -> None:
        self._killed.add(job_id)
        argv = ["scancel", "--full", "--signal=KILL", job_id]
        if quiet:
            # From a timer or a poll: the job may have ended meanwhile ("already completing"),
            # and there is no caller to tell; a missed kill is retried by the next poll.
            with contextlib.suppress(Exception):
                self._runner.run(argv, timeout=self.options.command_timeout_s)
            return
        self._run(argv)

    def capacity(self) -> SlurmCapacity:
        """Nodes and GPUs of the pool's gres type in its partition, as ``sinfo`` sees them."""
        argv = ["sinfo", "--noheader", "--Node", f"--partition={self.options.partition}"]
        with map_slurm_errors("read capacity"):
            out = self._run([*argv, f"--Format={SINFO_FORMAT}"])
            return parse_sinfo_capacity(out, self.options.gres_type)

    def pool_capacity(self) -> PoolCapacity:
        """The usable nodes of the partition and the fewest GPUs of our type on one of them:
        what the scheduler may plan with (a drained or down node does not count)."""
        usable = [n for n in self.capacity().nodes if n.usable and n.gpus > 0]
        return PoolCapacity(len(usable), min((n.gpus for n in usable), default=0))

    # -- helpers ------------------------------------------------------------------------------

    def _run(self, argv: Sequence[str], input: str | None = None) -> str:
        return run_checked(self._runner, argv, input=input, timeout=self.options.command_timeout_s)

    def _attempt(self, handle: JobHandle) -> AttemptDir:
        if handle.backend != self.name:
            raise BackendRejected(f"handle of backend {handle.backend!r} given to {self.name!r}")
        if "workdir" in handle.data:
            return AttemptDir(Path(handle.data["workdir"]))
        if not _SAFE_KEY.match(handle.key):
            raise BackendRejected(f"attempt key {handle.key!r} cannot be a directory")
        return AttemptDir(self.root / handle.key)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on directory ``path`` (created if missing). flock locks belong
    to an open file description, so two threads of one process exclude each other too."""
    path.mkdir(mode=0o711, exist_ok=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None
