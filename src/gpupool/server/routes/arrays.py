"""/v1/arrays: submit a job array, read its counts, cancel it.

An array's tasks are ordinary jobs (``/v1/jobs/<array id>_<index>``: read, cancel, logs one
task); these routes address the array as a whole. A submit answers with the array's id and
its number of tasks, not with every task.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Response

from gpupool.server.audit import AuditNoteDep
from gpupool.server.deps import PrincipalDep, RuntimeDep
from gpupool.server.schemas import ArrayOut, ArraySubmit, ErrorOut

router = APIRouter(prefix="/v1/arrays", tags=["jobs"])
ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorOut} for code in (401, 403, 404, 422)
}


@router.post("", status_code=201, response_model=ArrayOut, responses=ERRORS, name="array.submit")
def submit_array(
    body: ArraySubmit,
    runtime: RuntimeDep,
    principal: PrincipalDep,
    response: Response,
    note: AuditNoteDep,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)] = None,
) -> ArrayOut:
    note.team = body.team
    array, created = runtime.jobs.submit_array(principal, body, idempotency_key)
    note.target, note.team = f"{array.id} ({array.count} tasks)", array.team
    if not created:
        response.status_code = 200
    return array


@router.get("/{array_id}", response_model=ArrayOut, responses=ERRORS)
def get_array(array_id: str, runtime: RuntimeDep, principal: PrincipalDep) -> ArrayOut:
    return runtime.jobs.get_array(principal, array_id)


@router.post("/{array_id}/cancel", response_model=ArrayOut, responses=ERRORS, name="array.cancel")
def cancel_array(array_id: str, runtime: RuntimeDep, principal: PrincipalDep) -> ArrayOut:
    return runtime.jobs.cancel_array(principal, array_id)
