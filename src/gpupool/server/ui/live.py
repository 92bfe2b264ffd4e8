"""Live updates of the dashboard as server-sent events (``text/event-stream``).

* ``/ui/jobs/{id}/log/stream``: the job's log as it grows, one ``log`` event per line,
  redacted and followed exactly as ``GET /v1/jobs/{id}/logs?follow=true`` (``services.logs``),
  counted against the same per-user follower slots; an ``end`` event when the job has ended
  (the page's script then closes the stream instead of letting the browser reconnect).
* ``/ui/jobs/{id}/status/stream``: a ``status`` event whenever the job's shown status changes,
  ``end`` once it is final.
* ``/ui/live/overview``: every few seconds, queued and running jobs per team the principal
  reads and GPUs allocated per pool, as one JSON ``counts`` event; the overview page updates
  its numbers in place. It ends after ``OVERVIEW_S`` (the browser reconnects on its own).

The status and overview streams of one user are bounded like log followers: at most
``GPUPOOL_LOG_FOLLOWERS_PER_USER`` at once (``app.state.ui_streams``), 429 past it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from functools import partial

import anyio
import anyio.to_thread
from fastapi import APIRouter, Request
from starlette.responses import StreamingResponse

from gpupool.core.jobs import TERMINAL, shown_status
from gpupool.server.deps import RuntimeDep
from gpupool.server.routes.jobs import read_log
from gpupool.server.services.logs import FollowerSlots, FollowResponse, follow
from gpupool.server.ui import web

router = APIRouter(prefix="/ui", include_in_schema=False)
STATUS_POLL_S = 0.5
OVERVIEW_EVERY_S = 3.0
OVERVIEW_S = 300.0
SSE_HEADERS = {**web.HEADERS, "X-Accel-Buffering": "no"}  # no proxy buffering of events


def event(kind: str, data: str) -> bytes:
    lines = data.split("\n")
    return (f"event: {kind}\n" + "".join(f"data: {line}\n" for line in lines) + "\n").encode()


def shown_line(line: str) -> str:
    """A log line as a terminal leaves it: a carriage return (a progress bar redrawing itself)
    starts the line again. SSE would read a CR as the end of the event's line and drop the
    rest, so none is sent."""
    parts = [part for part in line.split("\r") if part]
    return parts[-1] if parts else ""


async def log_events(lines: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """One ``log`` event per line of ``lines`` (bytes as the follower yields them), then
    ``end``."""
    pending = ""
    async for chunk in lines:
        text = pending + chunk.decode("utf-8", "replace")
        *whole, pending = text.split("\n")
        for line in whole:
            yield event("log", shown_line(line))
    if pending:
        yield event("log", shown_line(pending))
    yield event("end", "")


@router.get("/jobs/{job_id}/log/stream", name="ui.job.log")
def log_stream(
    request: Request, runtime: RuntimeDep, job_id: str, s: web.SessionDep
) -> StreamingResponse:
    _, principal = s
    runtime.jobs.log_target(principal, job_id)  # 404/403 now, before the stream starts
    slots: FollowerSlots = request.app.state.log_followers
    slots.take(principal.user)
    lines = follow(
        partial(runtime.jobs.log_target, principal, job_id), partial(read_log, runtime), 0
    )
    return _sse(log_events(lines), partial(slots.give_back, principal.user))


def _sse(events: AsyncIterator[bytes], release: Callable[[], None]) -> StreamingResponse:
    """An event stream that gives its slot back however it ends."""
    response = FollowResponse(events, release)
    response.headers.update(SSE_HEADERS)
    response.headers["content-type"] = "text/event-stream; charset=utf-8"
    return response


def _slot(request: Request, user: str) -> Callable[[], None]:
    """Take one of the user's dashboard stream slots (429 past the limit); its release."""
    slots: FollowerSlots = request.app.state.ui_streams
    slots.take(user)
    return partial(slots.give_back, user)


@router.get("/jobs/{job_id}/status/stream", name="ui.job.status")
def status_stream(
    request: Request, runtime: RuntimeDep, job_id: str, s: web.SessionDep
) -> StreamingResponse:
    _, principal = s
    runtime.jobs.get(principal, job_id)  # 404/403 now

    async def statuses() -> AsyncIterator[bytes]:
        last = ""
        while True:
            job = await anyio.to_thread.run_sync(runtime.jobs.get, principal, job_id)
            shown = shown_status(job.status, False)
            if shown != last:
                last = shown
                yield event("status", shown)
            if job.status in TERMINAL:
                yield event("end", "")
                return
            await anyio.sleep(STATUS_POLL_S)

    return _sse(statuses(), _slot(request, principal.user))


@router.get("/live/overview", name="ui.live.overview")
def overview_stream(request: Request, runtime: RuntimeDep, s: web.SessionDep) -> StreamingResponse:
    _, principal = s

    def counts() -> str:
        teams = runtime.teams.list(principal).items
        pools = runtime.teams.pools(principal).items
        return json.dumps(
            {
                **{f"queued-{t.name}": t.queued for t in teams},
                **{f"running-{t.name}": t.running for t in teams},
                **{f"allocated-{p.name}": p.gpus_allocated for p in pools},
            }
        )

    async def ticks() -> AsyncIterator[bytes]:
        # A deadline, not a cancel scope: a scope must not span the generator's yields.
        deadline = anyio.current_time() + OVERVIEW_S
        while anyio.current_time() < deadline:
            yield event("counts", await anyio.to_thread.run_sync(counts))
            await anyio.sleep(OVERVIEW_EVERY_S)

    return _sse(ticks(), _slot(request, principal.user))
