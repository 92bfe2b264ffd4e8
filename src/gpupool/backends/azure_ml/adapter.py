"""The Azure ML backend: every attempt is one command job on the pool's compute cluster
(docs/azure.md).

Invariants:

* **One run per key.** The job name comes from ``spec.key`` (:mod:`.job`) and a workspace
  holds one job per name. ``submit`` looks the name up first and adopts a job it finds when
  its ``gpupool_key`` tag is the key (else ``BackendRejected``: not gpupool's); it creates the
  job otherwise, and when that create is refused because a concurrent submit created it
  first, it looks again and adopts. Nothing is kept locally: a new adapter polls, cancels and
  reads logs of old handles.
* **Azure ML runs it, gpupool only reads.** ``limits.timeout`` enforces ``max_runtime_s``,
  ``begin_cancel`` cancels (not waited for: ``cancel`` never blocks), the run's
  ``user_logs/std_log.txt`` is the log, read by byte range.
* No secret in a handle, a message or a ``repr``: grant URLs travel in the job's inputs and
  environment only, and URL queries are cut from error messages.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from gpupool.backends.azure_batch.errors import is_not_found, status_code
from gpupool.backends.azure_ml.client import (
    CredentialFactory,
    default_credential,
    ml_client,
    run_details,
)
from gpupool.backends.azure_ml.errors import map_azure_ml_errors
from gpupool.backends.azure_ml.job import KEY_TAG, JobPlan, job_name, plan
from gpupool.backends.azure_ml.options import AzureMLOptions
from gpupool.backends.azure_ml.status import NEEDS_DETAILS, AMLJobView, verdict
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

LOG_CHUNK_MAX = 1 << 20
LOG_FILE = "user_logs/std_log.txt"


class AzureMLBackend:
    name = "azure-ml"
    # Single node; Azure ML uploads the log while the job runs.
    capabilities = frozenset({Capability.LOG_STREAM})

    def __init__(
        self, ctx: AdapterContext, *, credential_factory: CredentialFactory | None = None
    ) -> None:
        self.ctx = ctx
        self.options = AzureMLOptions.parse(ctx.options)
        self._credential_factory = credential_factory or default_credential
        self._lock = threading.Lock()  # guards _client
        self._client: Any = None

    def __repr__(self) -> str:
        return f"AzureMLBackend(pool={self.ctx.pool!r}, workspace={self.options.workspace!r})"

    def close(self) -> None:
        with self._lock:
            self._client = None

    def _ml(self) -> Any:
        with self._lock:
            if self._client is None:
                with self._mapped("build the Azure ML client", BackendMisconfigured):
                    self._client = ml_client(self.options, self._credential_factory())
            return self._client

    def _mapped(
        self, action: str, invalid: type[BackendError] = BackendRejected
    ) -> AbstractContextManager[None]:
        return map_azure_ml_errors(action, invalid=invalid)

    # -- submit ------------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> JobHandle:
        self._validate(spec)
        job = plan(
            spec,
            prefix=self.options.job_name_prefix,
            output_datastore=self.options.output_datastore,
        )
        client = self._ml()
        existing = self._job(job.name)
        if existing is None:
            with self._mapped(f"submit {spec.key}"):
                try:
                    client.jobs.create_or_update(self._command(spec, job))
                except Exception as exc:
                    # Refused because a concurrent submit created it first: adopt below.
                    if status_code(exc) not in (400, 409):
                        raise
                    existing = self._job(job.name)
                    if existing is None:
                        raise
        if existing is not None and existing.tags.get(KEY_TAG) != spec.key:
            raise BackendRejected(
                f"the workspace {self.options.workspace!r} already has a job {job.name!r} that "
                f"gpupool did not submit for attempt {spec.key}"
            )
        return self._handle(spec.key, job.name)

    def _validate(self, spec: JobSpec) -> None:
        check_spec(spec, self.ctx.pool)
        if spec.nodes != 1:
            raise BackendRejected(
                f"azure-ml pools run single-node jobs only; this job asks for {spec.nodes} "
                "nodes (distributed command jobs are not supported yet)"
            )
        if not spec.image and not self.options.environment:
            raise BackendRejected(
                f"pool {self.ctx.pool!r} has no environment and the job names no image: set "
                "the pool's options.environment (azureml:<name>:<version>) or the job's image"
            )

    def _command(self, spec: JobSpec, job: JobPlan) -> Any:
        from azure.ai.ml import Input, Output, command
        from azure.ai.ml.entities import Environment

        environment: Any = Environment(image=spec.image) if spec.image else self.options.environment
        built = command(
            name=job.name,
            display_name=job.display_name,
            command=job.command,
            environment=environment,
            compute=self.options.compute,
            experiment_name=self.options.experiment(self.ctx.pool),
            environment_variables=dict(job.environment_variables),
            tags=dict(job.tags),
            inputs={
                name: Input(type="uri_file", path=url, mode="download")
                for name, url in job.inputs.items()
            },
            outputs={
                name: Output(type="uri_folder", path=uri, mode="upload")
                for name, uri in job.outputs.items()
            },
        )
        if job.timeout_s is not None:
            built.set_limits(timeout=job.timeout_s)
        return built

    def find(self, key: str) -> JobHandle | None:
        """The command job submitted for attempt ``key``, if the workspace has it (``Finder``)."""
        name = job_name(key, self.options.job_name_prefix)
        found = self._job(name)
        if found is None or found.tags.get(KEY_TAG) != key:
            return None
        return self._handle(key, name)

    def _handle(self, key: str, name: str) -> JobHandle:
        return JobHandle(backend=self.name, pool=self.ctx.pool, provider_id=name, key=key)

    # -- poll, logs, cancel -----------------------------------------------------------------

    def _job(self, name: str) -> AMLJobView | None:
        client = self._ml()
        with self._mapped(f"read the job {name}"):
            try:
                found = client.jobs.get(name)
            except Exception as exc:
                if is_not_found(exc):
                    return None
                raise
        limits = getattr(found, "limits", None)
        timeout = getattr(limits, "timeout", None)
        status = getattr(found, "status", None)
        return AMLJobView(
            name=name,
            status=str(getattr(status, "value", status) or ""),
            tags=dict(getattr(found, "tags", None) or {}),
            timeout_s=int(timeout) if timeout is not None else None,
        )

    def _with_details(self, job: AMLJobView) -> tuple[AMLJobView, Any]:
        with self._mapped(f"read the run of {job.name}"):
            details = run_details(self._ml(), job.name)
        error = getattr(getattr(getattr(details, "error", None), "error", None), "message", "")
        return (
            AMLJobView(
                name=job.name,
                status=job.status,
                tags=job.tags,
                timeout_s=job.timeout_s,
                start=getattr(details, "start_time_utc", None),
                end=getattr(details, "end_time_utc", None),
                error=str(error or ""),
            ),
            details,
        )

    def poll(self, handles: Sequence[JobHandle]) -> Mapping[str, BackendStatus]:
        statuses: dict[str, BackendStatus] = {}
        for handle in handles:
            job = self._job(self._name(handle))
            if job is not None and job.status in NEEDS_DETAILS:
                job, _ = self._with_details(job)
            statuses[handle.key] = verdict(job)
        return statuses

    def logs(self, handle: JobHandle, offset: int = 0) -> LogChunk:
        import requests

        offset = max(0, offset)
        job = self._job(self._name(handle))
        if job is None:
            return LogChunk(data=b"", next_offset=offset, complete=True)
        final = verdict(job).state in FINAL_STATES
        _, details = self._with_details(job)
        files = dict(getattr(details, "log_files", None) or {})
        url = files.get(LOG_FILE)
        data = b""
        if url:
            with self._mapped(f"read the log of {job.name}"):
                answer = requests.get(
                    url,
                    headers={"Range": f"bytes={offset}-{offset + LOG_CHUNK_MAX - 1}"},
                    timeout=self.options.request_timeout_s,
                )
                if answer.status_code not in (404, 416):
                    answer.raise_for_status()
                    data = answer.content[:LOG_CHUNK_MAX]
        return LogChunk(
            data=data,
            next_offset=offset + len(data),
            complete=final and len(data) < LOG_CHUNK_MAX,
        )

    def cancel(self, handle: JobHandle, grace_s: float) -> None:
        """Ask Azure ML to cancel the job; not waited for, and ``grace_s`` is Azure ML's own.
        Idempotent: a job that has ended, or is unknown, is left as it is."""
        del grace_s
        name = self._name(handle)
        job = self._job(name)
        if job is None or verdict(job).state in FINAL_STATES or job.status == "CancelRequested":
            return
        client = self._ml()
        with self._mapped(f"cancel {name}"):
            try:
                client.jobs.begin_cancel(name)
            except Exception as exc:
                if not (is_not_found(exc) or status_code(exc) in (400, 409)):
                    raise

    def _name(self, handle: JobHandle) -> str:
        if handle.backend != self.name:
            raise BackendRejected(f"handle of backend {handle.backend!r} given to {self.name!r}")
        return handle.provider_id or job_name(handle.key, self.options.job_name_prefix)
