"""The Ray backend: every attempt is one Ray Job, submitted through the Jobs API
(docs/architecture.md §6).

Invariants:

* **One run per key.** The submission id *is* ``spec.key`` (after the pool's
  ``submission_id_prefix``, empty by default). Ray's job manager records a
  submission id at most once (an atomic put-if-absent in the GCS), so of any number of
  concurrent or repeated submits exactly one starts a run; the others get "already exists",
  look the job up and return the same handle. Nothing is kept locally: a new adapter, in this
  process or after a restart, polls, cancels and reads logs of old handles.
* **Ray owns the GPUs.** The job asks Ray for ``gpus_per_node`` GPUs and the same amount of the
  custom resource ``<resource_prefix><gpu_type>``, and sees the ``CUDA_VISIBLE_DEVICES`` Ray
  assigns; the scheduler's ``spec.devices`` are not used (they are indices of gpupool's model of
  the pool, not of a Ray node). The user's ``env`` can never set ``CUDA_VISIBLE_DEVICES`` (or
  Ray's switches that stop Ray from setting it); a job without GPUs gets ``""``.
* **No final status while the process may live.** ``max_runtime_s`` is enforced while polling
  (see :mod:`.status`), and the job is reported FAILED only once Ray says it has stopped.
* The bearer token is sent as a header and appears in no ``repr``, message or handle.

The state mapping and the limits are in ``README.md`` next to this file.
"""

from __future__ import annotations

import os
import re
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
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
    contract_env,
)
from gpupool.backends.errors import BackendError, BackendMisconfigured, BackendRejected
from gpupool.backends.ray import image
from gpupool.backends.ray.client import ClientFactory, JobsClient, ray_jobs_client
from gpupool.backends.ray.errors import is_duplicate_submission, is_not_found, map_ray_errors
from gpupool.backends.ray.options import RayOptions
from gpupool.backends.ray.status import (
    META_KEY,
    META_MAX_RUNTIME,
    META_POOL,
    RayJob,
    verdict,
)
from gpupool.backends.validation import check_spec

LOG_CHUNK_MAX = 1 << 20  # bytes per logs() call
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")  # a directory and a submission id
_GIB = 1 << 30
# Variables of the user's env that would take the GPUs or the stop signal out of Ray's hands.
_RESERVED_ENV = frozenset(
    {"CUDA_VISIBLE_DEVICES", "RAY_JOB_STOP_WAIT_TIME_S", "RAY_JOB_STOP_SIGNAL"}
)
_RESERVED_ENV_PREFIX = "RAY_EXPERIMENTAL_NOSET_"
WORK, INPUTS, OUTPUTS = "work", "inputs", "outputs"


class RayBackend:
    name = "ray"
    capabilities = frozenset({Capability.LOG_STREAM})

    def __init__(
        self,
        ctx: AdapterContext,
        *,
        client_factory: ClientFactory | None = None,
        clock: Callable[[], float] = time.time,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        if not _SAFE_NAME.match(ctx.pool):
            raise BackendMisconfigured(f"pool name {ctx.pool!r} cannot be used as a directory")
        self.ctx = ctx
        self.options = RayOptions.parse(ctx.options)
        token = self.options.bearer(os.environ if environ is None else environ)
        self._headers = {"Authorization": f"Bearer {token.reveal()}"} if token else {}
        self._secrets = (token.reveal(),) if token else ()
        root = self.options.working_dir_root
        self.root = Path(root) if root else Path(ctx.state_dir).absolute() / "ray" / ctx.pool
        self._factory = client_factory or ray_jobs_client
        self._clock = clock  # wall clock: compared with Ray's start and end times
        self._lock = threading.Lock()  # guards _client
        self._client: JobsClient | None = None

    def __repr__(self) -> str:
        return f"RayBackend(pool={self.ctx.pool!r}, address={self.options.address!r})"

    def close(self) -> None:
        """Nothing to release: the SDK opens a connection per request."""
        with self._lock:
            self._client = None

    def _jobs(self) -> JobsClient:
        # Built on first use, not in __init__: the SDK dials the cluster when it is built, and
        # a pool whose cluster is down must still load (its calls then raise
        # BackendUnavailable until the cluster answers).
        with self._lock:
            if self._client is None:
                with self._mapped(f"connect to {self.options.address}", BackendMisconfigured):
                    self._client = self._factory(
                        self.options.address, self._headers, self.options.request_timeout_s
                    )
            return self._client

    def _mapped(
        self, action: str, invalid: type[BackendError] = BackendRejected
    ) -> AbstractContextManager[None]:
        return map_ray_errors(action, invalid=invalid, secrets=self._secrets)

    # -- submit ------------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> JobHandle:
        self._validate(spec)
        work = self.root / spec.key / WORK
        with self._mapped("prepare the attempt directory", BackendMisconfigured):
            for d in (work, work.parent / INPUTS, work.parent / OUTPUTS):
                d.mkdir(parents=True, exist_ok=True)
        request = self._request(spec, work)
        client = self._jobs()
        with self._mapped(f"submit {spec.key}"):
            try:
                client.submit_job(**request)
            except RuntimeError as exc:
                if not is_duplicate_submission(exc):
                    raise
                existing = client.get_job_info(self._id(spec.key))
                self._check_owner(spec, RayJob.from_details(existing))
        return self._handle(spec.key)

    def _validate(self, spec: JobSpec) -> None:
        check_spec(spec, self.ctx.pool)
        if spec.nodes != 1:
            raise BackendRejected(
                f"ray pools run single-node jobs only; this job asks for {spec.nodes} nodes "
                "(multi-node jobs need Ray placement groups, not supported yet)"
            )
        if spec.image:
            supported, version = image.image_uri_supported()
            work = self.root.absolute() / spec.key / WORK
            image.check(
                spec, self.ctx.container, work, self.options.ray_temp_dir, supported, version
            )
        if not _SAFE_NAME.match(spec.key):
            raise BackendRejected(f"attempt key {spec.key!r} cannot be a Ray submission id")
        if spec.gpus_per_node < 0 or spec.cpus < 0 or spec.memory_gb < 0:
            raise BackendRejected("gpus_per_node, cpus and memory_gb must not be negative")

    def _request(self, spec: JobSpec, work: Path) -> dict[str, Any]:
        """The keyword arguments of ``submit_job`` for ``spec``."""
        user_env = {
            k: v
            for k, v in spec.env.items()
            if k not in _RESERVED_ENV and not k.startswith(_RESERVED_ENV_PREFIX)
        }
        attempt = work.parent
        env = contract_env(
            replace(spec, env=user_env), str(work), str(attempt / INPUTS), str(attempt / OUTPUTS)
        )
        gpus = spec.gpus_per_node
        if gpus == 0:
            env["CUDA_VISIBLE_DEVICES"] = ""  # Ray leaves it unset: the job would see every GPU
        if self.options.stop_grace_s is not None:  # read by the job's supervisor when stopping
            env["RAY_JOB_STOP_WAIT_TIME_S"] = str(self.options.stop_grace_s)
        metadata = {
            META_KEY: spec.key,
            META_POOL: spec.pool,
            "gpupool_team": spec.team,
            "gpupool_user": spec.user,
        }
        if spec.max_runtime_s is not None:
            metadata[META_MAX_RUNTIME] = str(spec.max_runtime_s)
        request: dict[str, Any] = {
            "entrypoint": f"cd {shlex.quote(str(work))} && exec {shlex.join(spec.command)}",
            "submission_id": self._id(spec.key),
            "runtime_env": (image.runtime_env(spec, env) if spec.image else {"env_vars": env}),
            "metadata": metadata,
        }
        if spec.cpus > 0:
            request["entrypoint_num_cpus"] = spec.cpus
        if spec.memory_gb > 0:
            request["entrypoint_memory"] = int(spec.memory_gb * _GIB)
        if gpus > 0:
            request["entrypoint_num_gpus"] = gpus
            request["entrypoint_resources"] = {
                f"{self.options.resource_prefix}{spec.gpu_type}": float(gpus)
            }
        return request

    def find(self, key: str) -> JobHandle | None:
        """The job submitted under ``key``, if the cluster knows it (``Finder``)."""
        client = self._jobs()
        with self._mapped(f"look up {self._id(key)}"):
            try:
                client.get_job_info(self._id(key))
            except RuntimeError as exc:
                if not is_not_found(exc):
                    raise
                return None
        return self._handle(key)

    def _check_owner(self, spec: JobSpec, job: RayJob) -> None:
        if job.metadata.get(META_KEY) != spec.key or job.metadata.get(META_POOL) != spec.pool:
            raise BackendRejected(
                f"the Ray cluster already has a job with submission id {self._id(spec.key)!r} that "
                f"gpupool did not submit for pool {spec.pool!r}"
            )

    def _id(self, key: str) -> str:
        return f"{self.options.submission_id_prefix}{key}"

    def _handle(self, key: str) -> JobHandle:
        return JobHandle(backend=self.name, pool=self.ctx.pool, provider_id=self._id(key), key=key)

    # -- poll, logs, cancel -----------------------------------------------------------------

    def poll(self, handles: Sequence[JobHandle]) -> Mapping[str, BackendStatus]:
        if not handles:
            return {}
        ids = {handle.key: self._submission_id(handle) for handle in handles}
        client = self._jobs()
        with self._mapped("list jobs"):
            listed = client.list_jobs()  # one request for every handle
        jobs = {job.submission_id: job for job in map(RayJob.from_details, listed)}
        now = self._clock()
        statuses = {}
        for key, submission_id in ids.items():
            found = verdict(jobs.get(submission_id), now=now)
            if found.stop:
                self._stop(submission_id)
            statuses[key] = found.status
        return statuses

    def logs(self, handle: JobHandle, offset: int = 0) -> LogChunk:
        submission_id = self._submission_id(handle)
        offset = max(0, offset)
        client = self._jobs()
        with self._mapped(f"read the logs of {submission_id}"):
            try:
                # Decide "final" before reading: output written before the end is then all there.
                job = RayJob.from_details(client.get_job_info(submission_id))
                final = verdict(job, now=self._clock()).status.state in FINAL_STATES
                # Ray answers with the whole log every time; gpupool's offsets are into its bytes.
                text = client.get_job_logs(submission_id)
            except RuntimeError as exc:
                if not is_not_found(exc):
                    raise
                return LogChunk(data=b"", next_offset=offset, complete=True)
        whole = text.encode("utf-8", errors="replace")
        data = whole[offset : offset + LOG_CHUNK_MAX]
        next_offset = offset + len(data)
        return LogChunk(
            data=data, next_offset=next_offset, complete=final and next_offset >= len(whole)
        )

    def cancel(self, handle: JobHandle, grace_s: float) -> None:
        """Ask Ray to stop the job: SIGTERM, then SIGKILL after the supervisor's grace (the
        pool's ``stop_grace_s``, else the head's ``RAY_JOB_STOP_WAIT_TIME_S``, default 3 s).
        ``grace_s`` cannot be passed per call through the Jobs API. Idempotent."""
        del grace_s
        self._stop(self._submission_id(handle))

    def _stop(self, submission_id: str) -> None:
        client = self._jobs()
        with self._mapped(f"stop {submission_id}"):
            try:
                client.stop_job(submission_id)  # False when it had already ended: fine
            except RuntimeError as exc:
                if not is_not_found(exc):
                    raise

    def _submission_id(self, handle: JobHandle) -> str:
        if handle.backend != self.name:
            raise BackendRejected(f"handle of backend {handle.backend!r} given to {self.name!r}")
        return handle.provider_id or self._id(handle.key)
