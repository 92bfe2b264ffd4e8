"""/v1/jobs: submit, list, get, cancel, logs, why."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response

from gpupool.backends.base import JobHandle, LogChunk
from gpupool.backends.errors import BackendError
from gpupool.core.errors import Unavailable
from gpupool.core.jobs import TERMINAL
from gpupool.server.audit import AuditNoteDep, audit_in
from gpupool.server.deps import PrincipalDep, RuntimeDep
from gpupool.server.schemas import ErrorOut, JobOut, JobPage, JobSubmit, WhyOut
from gpupool.server.services.logs import FollowerSlots, FollowResponse, follow, read_once

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])
ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorOut} for code in (401, 403, 404, 422)
}


@router.post("", status_code=201, response_model=JobOut, responses=ERRORS, name="job.submit")
def submit(
    body: JobSubmit,
    runtime: RuntimeDep,
    principal: PrincipalDep,
    response: Response,
    note: AuditNoteDep,
    request: Request,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)] = None,
) -> JobOut:
    note.team = body.team
    # The audit entry goes into the job's own transaction (one commit per submit).
    job, created = runtime.jobs.submit(
        principal, body, idempotency_key, audit=audit_in(request, 201)
    )
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
    group: bool = False,
    array: Annotated[str | None, Query(max_length=40)] = None,
) -> JobPage:
    """Newest first. ``group=true``: a job array stands as one item (its first task) and
    ``arrays`` counts each one's tasks per status; ``array``: only that array's tasks."""
    return runtime.jobs.list(principal, team, status, limit, cursor, group, array)


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
    responses={**ERRORS, 429: {"model": ErrorOut}, 200: {"content": {"text/plain": {}}}},
    response_class=Response,
)
def logs(
    job_id: str,
    request: Request,
    runtime: RuntimeDep,
    principal: PrincipalDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    follow_: Annotated[bool, Query(alias="follow")] = False,
) -> Response:
    """The job's output (stdout and stderr) of its newest attempt, from ``offset``, redacted
    (see ``services.logs``). With ``follow=true``, a stream until the job ends (429 beyond
    the per-user number of streams)."""
    status, attempt = runtime.jobs.log_target(principal, job_id)
    if not follow_:
        handle = None if attempt is None or attempt.handle is None else attempt.handle
        chunk = read_once(
            partial(read_log, runtime),
            None if handle is None else JobHandle.from_dict(handle),
            offset,
            terminal=status in TERMINAL,
        )
        return Response(
            content=chunk.data,
            media_type="text/plain; charset=utf-8",
            headers={
                "X-Next-Offset": str(chunk.next_offset),
                "X-Log-Complete": "true" if chunk.complete else "false",
            },
        )
    slots: FollowerSlots = request.app.state.log_followers
    slots.take(principal.user)
    stream = follow(
        partial(runtime.jobs.log_target, principal, job_id), partial(read_log, runtime), offset
    )
    return FollowResponse(stream, partial(slots.give_back, principal.user))


def read_log(runtime: RuntimeDep, handle: JobHandle, offset: int) -> LogChunk:
    try:
        return runtime.execution.logs(handle, offset)
    except BackendError as exc:
        raise Unavailable(f"logs are not readable now: {exc}") from exc
