"""/v1/artifacts: files of a team's local storage, through the signed URLs of job grants.

The query string (``gp_m``, ``gp_scope``, ``gp_user``, ``gp_exp``, ``gp_sig``) is the
credential; see ``gpupool.data.grants.local``. Answers 403 for a wrong method, path, team,
an expired or altered URL, a user no longer in the team, a symbolic link on the way, or a
file the job's user may not read or write; 404 for what does not exist.

A read is served from the file descriptor the service opened (never by path again, so
nothing can be swapped in between): ``Content-Length`` is the size at open time, and the
bytes are read in a worker thread, at most that many.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import AsyncIterator

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel
from starlette.types import Receive, Scope, Send

from gpupool.data.safe_fs import OpenedFile
from gpupool.server.deps import RuntimeDep
from gpupool.server.schemas import ErrorOut

router = APIRouter(prefix="/v1/artifacts", tags=["artifacts"])
ERRORS: dict[int | str, dict[str, object]] = {code: {"model": ErrorOut} for code in (403, 404, 422)}
CHUNK = 1024 * 1024


class ArtifactWritten(BaseModel):
    path: str
    bytes: int


class OpenedFileResponse(StreamingResponse):
    """Streams an :class:`OpenedFile` and closes it, however the response ends."""

    def __init__(self, opened: OpenedFile) -> None:
        self._opened = opened
        # A response never sent (the client went away first) still closes the fd.
        weakref.finalize(self, opened.close)
        super().__init__(
            self._chunks(),
            media_type="application/octet-stream",
            headers={"Content-Length": str(opened.size)},
        )

    async def _chunks(self) -> AsyncIterator[bytes]:
        offset, size = 0, self._opened.size
        while offset < size:
            want = min(CHUNK, size - offset)
            data = await anyio.to_thread.run_sync(os.pread, self._opened.fd, want, offset)
            if not data:
                return  # truncated meanwhile: the short body ends the response
            offset += len(data)
            yield data

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._opened.close()


@router.get(
    "/{team}/{path:path}",
    status_code=200,  # OpenedFileResponse takes no status code for FastAPI to read one from
    response_class=OpenedFileResponse,
    responses={**ERRORS, 200: {"content": {"application/octet-stream": {}}}},
)
def read_artifact(team: str, path: str, request: Request, runtime: RuntimeDep) -> StreamingResponse:
    opened = runtime.artifacts.read(team, path, dict(request.query_params))
    return OpenedFileResponse(opened)


@router.put(
    "/{team}/{path:path}", status_code=201, response_model=ArtifactWritten, responses=ERRORS
)
async def write_artifact(
    team: str, path: str, request: Request, runtime: RuntimeDep
) -> ArtifactWritten:
    size = await runtime.artifacts.write(team, path, dict(request.query_params), request.stream())
    return ArtifactWritten(path=path, bytes=size)
