"""/v1/jobs: submit, list, get, cancel, logs, why."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import StreamingResponse

from gpupool.backends.base import JobHandle, LogChunk
from gpupool.backends.errors import BackendError
from gpupool.core.errors import Unavailable
from gpupool.core.jobs import TERMINAL
from gpupool.server.audit import AuditNoteDep
from gpupool.server.deps import PrincipalDep, RuntimeDep
from gpupool.server.schemas import ErrorOut, JobOut, JobPage, JobSubmit, WhyOut
from gpupool.server.services.jobs import follow

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorOut} for code in (401, 403, 404, 422)
}
FOLLOW_POLL_S = 0.2


@router.post("", status_code=201, response_model=JobOut, responses=ERRORS, name="job.submit")
def submit(
    body: JobSubmit,
    runtime: RuntimeDep,
    principal: PrincipalDep,
    response: Response,
    note: AuditNoteDep,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)] = None,
) -> JobOut:
    note.team = body.team
    job, created = runtime.jobs.submit(principal, body, idempotency_key)
    note.target, note.team = job.id, job.team
    if not created:
        response.status_code = 200
    return job


@router.get("", response_model=JobPage, responses=ERRORS)
def list_jobs(
    runtime: RuntimeDep,
    principal: PrincipalDep,
    team: str | None = None,
    status: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: str | None = None,
) -> JobPage:
    return runtime.jobs.list(principal, team, status, limit, cursor)


@router.get("/{job_id}", response_model=JobOut, responses=ERRORS)
def get_job(job_id: str, runtime: RuntimeDep, principal: PrincipalDep) -> JobOut:
    return runtime.jobs.get(principal, job_id)


@router.post("/{job_id}/cancel", response_model=JobOut, responses=ERRORS, name="job.cancel")
def cancel_job(job_id: str, runtime: RuntimeDep, principal: PrincipalDep) -> JobOut:
    return runtime.jobs.cancel(principal, job_id)


@router.get("/{job_id}/why", response_model=WhyOut, responses=ERRORS)
def why(job_id: str, runtime: RuntimeDep, principal: PrincipalDep) -> WhyOut:
    return runtime.jobs.why(principal, job_id)


@router.get(
    "/{job_id}/logs",
    responses={**ERRORS, 200: {"content": {"text/plain": {}}}},
    response_class=Response,
)
def logs(
    job_id: str,
    runtime: RuntimeDep,
    principal: PrincipalDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    follow_: Annotated[bool, Query(alias="follow")] = False,
) -> Response:
    """The job's output (stdout and stderr) of its newest attempt, from ``offset``."""
    status, attempt = runtime.jobs.log_target(principal, job_id)
    if not follow_:
        if attempt is None or attempt.handle is None:
            chunk = LogChunk(b"", offset, complete=status in TERMINAL)
        else:
            chunk = _read(runtime, JobHandle.from_dict(attempt.handle), offset)
        return Response(
            content=chunk.data,
            media_type="text/plain; charset=utf-8",
            headers={
                "X-Next-Offset": str(chunk.next_offset),
                "X-Log-Complete": "true" if chunk.complete else "false",
            },
        )
    return StreamingResponse(
        _follow(runtime, principal, job_id, offset), media_type="text/plain; charset=utf-8"
    )


def _read(runtime: RuntimeDep, handle: JobHandle, offset: int) -> LogChunk:
    try:
        return runtime.execution.logs(handle, offset)
    except BackendError as exc:
        raise Unavailable(f"logs are not readable now: {exc}") from exc


def _follow(
    runtime: RuntimeDep, principal: PrincipalDep, job_id: str, start: int
) -> Iterator[bytes]:
    """Stream the current attempt; when it ends and the job goes on, continue with the next."""
    offset, streamed_attempt = start, None
    while True:
        status, attempt = runtime.jobs.log_target(principal, job_id)
        if attempt is None or attempt.handle is None or attempt.number == streamed_attempt:
            if status in TERMINAL:
                return
            time.sleep(FOLLOW_POLL_S)
            continue
        if streamed_attempt is not None:
            offset = 0
            yield f"--- attempt {attempt.number} ---\n".encode()
        handle = JobHandle.from_dict(attempt.handle)

        def chunks(at: int, handle: JobHandle = handle) -> tuple[bytes, int, bool]:
            chunk = _read(runtime, handle, at)
            if not chunk.data and not chunk.complete:
                time.sleep(FOLLOW_POLL_S)
            return chunk.data, chunk.next_offset, chunk.complete

        yield from follow(chunks, offset)
        streamed_attempt = attempt.number
