"""The async SDK builds the same requests and maps the same errors as the sync one."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from gpupool.client.async_sdk import AsyncClient
from gpupool.client.errors import Conflict, ConnectionFailed, NotFound
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


def test_async_reports_send_what_the_sync_client_sends() -> None:
    """Teams, pools, usage, costs, attempts and budgets: the same requests as ``Client``."""
    from gpupool.client.sdk import Client
    from gpupool.client.testing import budget_json, pool_json, team_json

    def fake() -> FakeApi:
        api = FakeApi()
        api.add("GET", "/v1/teams", json={"items": [team_json()]})
        api.add("GET", "/v1/teams/team-a", json=team_json())
        api.add("GET", "/v1/pools", json={"items": [pool_json()]})
        api.add("GET", "/v1/usage", json={"rows": [{"team": "team-a", "allocated_gpu_hours": 2}]})
        pages = {None: ([{"attempt_id": 1}], "c2"), "c2": ([{"attempt_id": 2}], None)}

        def costs(request: httpx.Request) -> httpx.Response:
            if request.url.params.get("report") != "attempts":
                return httpx.Response(200, json={"currency": "EUR", "rows": []})
            items, cursor = pages[request.url.params.get("cursor")]
            return httpx.Response(200, json={"items": items, "next_cursor": cursor})

        api.add("GET", "/v1/costs", costs)
        api.add("GET", "/v1/budgets", json={"items": [budget_json()]})
        return api

    sync_api, async_api = fake(), fake()
    with Client("http://x", TOKEN, transport=sync_api.transport) as client:
        expected = [
            [t.name for t in client.teams()],
            client.team("team-a").cohort,
            [p.name for p in client.pools()],
            client.usage(period="month", at="2026-11-10", group_by="user").rows[0].team,
            client.costs(team="team-a").currency,
            [a.attempt_id for a in client.iter_usage_attempts(costs=True, limit=1)],
            [b.status for b in client.budgets(team="team-a")],
        ]

    async def scenario() -> list[object]:
        async with AsyncClient("http://x", TOKEN, transport=async_api.transport) as sdk:
            return [
                [t.name for t in await sdk.teams()],
                (await sdk.team("team-a")).cohort,
                [p.name for p in await sdk.pools()],
                (await sdk.usage(period="month", at="2026-11-10", group_by="user")).rows[0].team,
                (await sdk.costs(team="team-a")).currency,
                [a.attempt_id async for a in sdk.iter_usage_attempts(costs=True, limit=1)],
                [b.status for b in await sdk.budgets(team="team-a")],
            ]

    assert expected == [
        ["team-a"],
        "research",
        ["local-h100"],
        "team-a",
        "EUR",
        [1, 2],
        ["warning"],
    ]
    assert asyncio.run(scenario()) == expected
    sent = [(r.method, str(r.url)) for r in async_api.requests]
    assert sent == [(r.method, str(r.url)) for r in sync_api.requests]


def test_async_follow_logs_streams_until_the_end() -> None:
    api = FakeApi()

    def stream(request: httpx.Request) -> httpx.Response:
        assert request.url.params["follow"] == "true"
        assert request.url.params["offset"] == "3"
        return httpx.Response(200, content=b"line 1\nline 2\n")

    api.add("GET", "/v1/jobs/j-1/logs", stream)
    api.fail("GET", "/v1/jobs/j-2/logs", 404, "not_found", "job j-2 not found")

    async def scenario() -> bytes:
        async with AsyncClient("http://x", TOKEN, transport=api.transport) as sdk:
            return b"".join([chunk async for chunk in sdk.follow_logs("j-1", offset=3)])

    async def missing() -> None:
        async with AsyncClient("http://x", TOKEN, transport=api.transport) as sdk:
            async for _ in sdk.follow_logs("j-2"):
                pass

    assert asyncio.run(scenario()) == b"line 1\nline 2\n"
    with pytest.raises(NotFound, match="j-2 not found"):
        asyncio.run(missing())
