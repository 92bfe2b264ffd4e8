"""The async SDK builds the same requests and maps the same errors as the sync one."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gpupool.client.async_sdk import AsyncClient
from gpupool.client.errors import Conflict, ConnectionFailed
from gpupool.client.testing import FakeApi, job_json, why_json

TOKEN = "tok-s3cret-value"


def test_async_submit_job_cancel_why() -> None:
    api = FakeApi()
    api.add("POST", "/v1/jobs", json=job_json(id="j-1"), status=201)
    api.add("GET", "/v1/jobs/j-1", json=job_json(id="j-1", status="running"))
    api.add("POST", "/v1/jobs/j-1/cancel", json=job_json(id="j-1", status="cancelled"))
    api.add("GET", "/v1/jobs/j-1/why", json=why_json(job_id="j-1"))

    async def scenario() -> list[str]:
        async with AsyncClient("http://x", TOKEN, transport=api.transport) as sdk:
            submitted = await sdk.submit(["true"], gpus=2, idempotency_key="k1")
            running = await sdk.job(submitted.id)
            cancelled = await sdk.cancel(submitted.id)
            why = await sdk.why(submitted.id)
            return [submitted.status, running.status, cancelled.status, why.reasons[0].code]

    assert asyncio.run(scenario()) == ["queued", "running", "cancelled", "quota_exhausted"]
    submit = api.requests[0]
    assert submit.headers["Authorization"] == f"Bearer {TOKEN}"
    assert submit.headers["Idempotency-Key"] == "k1"
    assert submit.content == b'{"command":["true"],"resources":{"gpus":2,"nodes":1}}'


def test_async_iter_jobs_follows_cursors() -> None:
    api = FakeApi()
    pages = {None: ([job_json(id="j-1")], "c2"), "c2": ([job_json(id="j-2")], None)}

    def handler(request: httpx.Request) -> httpx.Response:
        items, cursor = pages[request.url.params.get("cursor")]
        return httpx.Response(200, json={"items": items, "next_cursor": cursor})

    api.add("GET", "/v1/jobs", handler)

    async def scenario() -> list[str]:
        async with AsyncClient("http://x", TOKEN, transport=api.transport) as sdk:
            return [job.id async for job in sdk.iter_jobs(status="queued")]

    assert asyncio.run(scenario()) == ["j-1", "j-2"]


def test_async_errors_use_the_same_table() -> None:
    api = FakeApi()
    api.fail("POST", "/v1/jobs/j-1/cancel", 409, "conflict", "job j-1 already finished")

    async def scenario() -> None:
        async with AsyncClient("http://x", TOKEN, transport=api.transport) as sdk:
            await sdk.cancel("j-1")

    with pytest.raises(Conflict, match="already finished"):
        asyncio.run(scenario())


def test_async_unreachable_is_connection_failed() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async def scenario() -> None:
        async with AsyncClient("http://x:1", TOKEN, transport=httpx.MockTransport(refuse)) as sdk:
            await sdk.whoami()

    with pytest.raises(ConnectionFailed, match="http://x:1"):
        asyncio.run(scenario())
