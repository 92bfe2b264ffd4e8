"""The Azure Batch backend: every attempt is one task of the pool's Batch job
(docs/azure.md).

Invariants:

* **One run per key.** The task id is derived from ``spec.key`` (:func:`.task.task_id`) and
  Batch creates a task id at most once per job: of any number of concurrent or repeated
  submits exactly one creates the task; the others get ``TaskExists``, read the task back,
  check its ``displayName`` is the same key (else ``BackendRejected``: not gpupool's task) and
  return the same handle. Nothing is kept locally: a new adapter, in this process or after a
  restart, polls, cancels and reads logs of old handles.
* **One job per pool.** Tasks go to the Batch job ``options.job_id`` (default
  ``gpupool-<pool>``) bound to the Batch pool ``batch_pool_id`` (default: the pool's name).
  The job is created on first use; ``create_pool: true`` also creates a missing Batch pool of
  fixed size (the autoscaled definition is printed by ``gpupool export azure-batch``).
* **Batch runs it, gpupool only reads.** ``maxWallClockTime`` enforces ``max_runtime_s``,
  ``terminate`` cancels, ``stdout.txt`` on the node is the log. The one thing gpupool does
  on its own is terminating a task that Batch requeued after a spot preemption, reported as
  PREEMPTED (see :mod:`.status`), so that the controller's new attempt is the only rerun.
* No secret in a handle, a message or a ``repr``: grant URLs travel in the task's body only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from gpupool.backends.azure_batch.client import ClientFactory, batch_client
from gpupool.backends.azure_batch.errors import (
    error_code,
    is_code,
    is_exists,
    is_not_found,
    map_azure_batch_errors,
    status_code,
)
from gpupool.backends.azure_batch.options import BatchOptions
from gpupool.backends.azure_batch.pooldef import fixed_pool
from gpupool.backends.azure_batch.status import BatchTaskView, verdict
from gpupool.backends.azure_batch.task import task_body, task_id
from gpupool.backends.base import (
    FINAL_STATES,
    AdapterContext,
    BackendStatus,
    Capability,
    JobHandle,
    JobSpec,
    LogChunk,
)
from gpupool.backends.errors import BackendError, BackendMisconfigured, BackendRejected
from gpupool.backends.validation import check_spec

LOG_CHUNK_MAX = 1 << 20  # bytes per logs() call
LOG_FILE = "stdout.txt"  # the wrapper joins stderr to it (see .task)
JOB_KEY = "job"  # handle.data: the Batch job the task is in


class AzureBatchBackend:
    name = "azure-batch"
    # Single node; the log is read from the node's file while the task runs.
    capabilities = frozenset({Capability.LOG_STREAM})

    def __init__(
        self,
        ctx: AdapterContext,
        *,
        client_factory: ClientFactory | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.ctx = ctx
        self.options = BatchOptions.parse(ctx.options)
        self.pool_id = self.options.pool_id(ctx.pool)
        self.job_id = self.options.job(ctx.pool)
        self._factory = client_factory or batch_client
        self._environ = os.environ if environ is None else environ
        self._lock = threading.Lock()  # guards _client and _job_ready
        self._client: Any = None
        self._job_ready = False

    def __repr__(self) -> str:
        return f"AzureBatchBackend(pool={self.ctx.pool!r}, account={self.options.account_url!r})"

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _batch(self) -> Any:
        # Built on first use: a pool whose account is unreachable must still load.
        with self._lock:
            if self._client is None:
                with self._mapped("build the Batch client", BackendMisconfigured):
                    self._client = self._factory(self.options, self._environ)
            return self._client

    def _mapped(
        self, action: str, invalid: type[BackendError] = BackendRejected
    ) -> AbstractContextManager[None]:
        return map_azure_batch_errors(action, invalid=invalid)

    # -- submit ------------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> JobHandle:
        self._validate(spec)
        from azure.batch import models

        body = task_body(spec, prefix=self.options.task_id_prefix)
        client = self._batch()
        self._ensure_job(client)
        with self._mapped(f"submit {spec.key}"):
            try:
                client.create_task(self.job_id, models.BatchTaskCreateOptions(body))
            except Exception as exc:
                if is_code(exc, "JobNotFound"):  # deleted since: make it again, once
                    self._job_ready = False
                    self._ensure_job(client)
                    client.create_task(self.job_id, models.BatchTaskCreateOptions(body))
                elif is_code(exc, "TaskExists") or (is_exists(exc) and error_code(exc) is None):
                    found = client.get_task(self.job_id, body["id"])
                    self._check_owner(spec, BatchTaskView.from_sdk(found))
                else:
                    raise
        return self._handle(spec.key, body["id"])

    def _validate(self, spec: JobSpec) -> None:
        check_spec(spec, self.ctx.pool)
        if spec.nodes != 1:
            raise BackendRejected(
                f"azure-batch pools run single-node jobs only; this job asks for {spec.nodes} "
                "nodes (multi-instance tasks are not supported yet)"
            )

    def _ensure_job(self, client: Any) -> None:
        """The pool's Batch job exists (and, with ``create_pool``, its Batch pool)."""
        if self._job_ready:
            return
        from azure.batch import models

        if self.options.create_pool:
            with self._mapped(f"create the Batch pool {self.pool_id}", BackendMisconfigured):
                try:
                    client.get_pool(self.pool_id)
                except Exception as exc:
                    if not is_not_found(exc):
                        raise
                    definition = fixed_pool(self.ctx, self.options)
                    try:
                        client.create_pool(models.BatchPoolCreateOptions(definition))
                    except Exception as again:
                        if not is_exists(again):
                            raise
        job = {"id": self.job_id, "poolInfo": {"poolId": self.pool_id}}
        with self._mapped(f"create the Batch job {self.job_id}", BackendMisconfigured):
            try:
                client.create_job(models.BatchJobCreateOptions(job))
            except Exception as exc:
                if not is_exists(exc):
                    raise
        self._job_ready = True

    def find(self, key: str) -> JobHandle | None:
        """The task submitted for attempt ``key``, if the pool's Batch job has it (``Finder``)."""
        tid = task_id(key, self.options.task_id_prefix)
        view = self._task(self.job_id, tid)
        if view is None or view.display_name != key:
            return None
        return self._handle(key, tid)

    def _check_owner(self, spec: JobSpec, task: BatchTaskView) -> None:
        if task.display_name != spec.key:
            raise BackendRejected(
                f"the Batch job {self.job_id!r} already has a task {task.id!r} that gpupool did "
                f"not submit for attempt {spec.key}"
            )

    def _handle(self, key: str, provider_id: str) -> JobHandle:
        return JobHandle(
            backend=self.name,
            pool=self.ctx.pool,
            provider_id=provider_id,
            key=key,
            data={JOB_KEY: self.job_id},
        )

    # -- poll, logs, cancel -----------------------------------------------------------------

    def poll(self, handles: Sequence[JobHandle]) -> Mapping[str, BackendStatus]:
        statuses: dict[str, BackendStatus] = {}
        for handle in handles:
            job, task = self._ids(handle)
            found = verdict(self._task(job, task))
            if found.stop:
                self._terminate(job, task)
            statuses[handle.key] = found.status
        return statuses

    def _task(self, job: str, task: str) -> BatchTaskView | None:
        client = self._batch()
        with self._mapped(f"read the task {task}"):
            try:
                return BatchTaskView.from_sdk(client.get_task(job, task))
            except Exception as exc:
                if is_not_found(exc):
                    return None
                raise

    def logs(self, handle: JobHandle, offset: int = 0) -> LogChunk:
        job, task = self._ids(handle)
        offset = max(0, offset)
        # Decide "final" before reading: output written before the end is then all there.
        view = self._task(job, task)
        final = view is None or verdict(view).status.state in FINAL_STATES
        if view is None:
            return LogChunk(data=b"", next_offset=offset, complete=True)
        client = self._batch()
        with self._mapped(f"read the log of {task}"):
            try:
                stream = client.download_task_file(
                    job, task, LOG_FILE, ocp_range=f"bytes={offset}-{offset + LOG_CHUNK_MAX - 1}"
                )
                data = b"".join(stream)
            except Exception as exc:
                # No file yet (the task has not started), or nothing past ``offset``.
                if not (is_not_found(exc) or status_code(exc) == 416):
                    raise
                data = b""
        data = data[:LOG_CHUNK_MAX]
        return LogChunk(
            data=data,
            next_offset=offset + len(data),
            complete=final and len(data) < LOG_CHUNK_MAX,
        )

    def cancel(self, handle: JobHandle, grace_s: float) -> None:
        """Terminate the task. Batch has no per-call grace period: ``grace_s`` is not used.
        Idempotent: a task that has completed, or is unknown, is left as it is."""
        del grace_s
        job, task = self._ids(handle)
        self._terminate(job, task)

    def _terminate(self, job: str, task: str) -> None:
        client = self._batch()
        with self._mapped(f"terminate {task}"):
            try:
                client.terminate_task(job, task)
            except Exception as exc:
                if not (is_not_found(exc) or is_exists(exc)):  # 409: it has already completed
                    raise

    def _ids(self, handle: JobHandle) -> tuple[str, str]:
        if handle.backend != self.name:
            raise BackendRejected(f"handle of backend {handle.backend!r} given to {self.name!r}")
        job = handle.data.get(JOB_KEY) or self.job_id
        return job, handle.provider_id or task_id(handle.key, self.options.task_id_prefix)
