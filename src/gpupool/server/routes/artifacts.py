"""/v1/artifacts: files of a team's local storage, through the signed URLs of job grants.

The query string (``gp_m``, ``gp_scope``, ``gp_exp``, ``gp_sig``) is the credential; see
``gpupool.data.grants.local``. Answers 403 for a wrong method, path, team, an expired or
altered URL.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel

from gpupool.server.deps import RuntimeDep
from gpupool.server.schemas import ErrorOut

router = APIRouter(prefix="/v1/artifacts", tags=["artifacts"])
ERRORS: dict[int | str, dict[str, object]] = {code: {"model": ErrorOut} for code in (403, 404, 422)}


class ArtifactWritten(BaseModel):
    path: str
    bytes: int


@router.get(
    "/{team}/{path:path}",
    response_class=FileResponse,
    responses={**ERRORS, 200: {"content": {"application/octet-stream": {}}}},
)
def read_artifact(team: str, path: str, request: Request, runtime: RuntimeDep) -> FileResponse:
    file = runtime.artifacts.read(team, path, dict(request.query_params))
    return FileResponse(file, media_type="application/octet-stream")


@router.put(
    "/{team}/{path:path}", status_code=201, response_model=ArtifactWritten, responses=ERRORS
)
async def write_artifact(
    team: str, path: str, request: Request, runtime: RuntimeDep
) -> ArtifactWritten:
    size = await runtime.artifacts.write(team, path, dict(request.query_params), request.stream())
    return ArtifactWritten(path=path, bytes=size)
