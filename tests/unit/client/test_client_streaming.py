"""Cursor iteration and log following: the SDK's two multi-request behaviours."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from gpupool.client.errors import NotFound
from gpupool.client.sdk import Client
from gpupool.client.testing import FakeApi, job_json


def test_iter_jobs_follows_cursors_until_none(api: FakeApi, client: Client) -> None:
    pages = {
        None: {"items": [job_json(id="j-1"), job_json(id="j-2")], "next_cursor": "c2"},
        "c2": {"items": [job_json(id="j-3")], "next_cursor": "c3"},
        "c3": {"items": [], "next_cursor": None},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=pages[request.url.params.get("cursor")])

    api.add("GET", "/v1/jobs", handler)

    ids = [job.id for job in client.iter_jobs(team="team-a", page_size=2)]

    assert ids == ["j-1", "j-2", "j-3"]
    assert [r.url.params.get("cursor") for r in api.requests] == [None, "c2", "c3"]
    assert {r.url.params["team"] for r in api.requests} == {"team-a"}
    assert {r.url.params["limit"] for r in api.requests} == {"2"}


def test_iter_jobs_is_lazy(api: FakeApi, client: Client) -> None:
    api.add("GET", "/v1/jobs", json={"items": [job_json()], "next_cursor": "more"})

    first = next(client.iter_jobs())

    assert first.id == "j-0001"
    assert len(api.requests) == 1


def test_follow_logs_yields_chunks_as_they_arrive(api: FakeApi, client: Client) -> None:
    produced: list[bytes] = []

    def chunks() -> Iterator[bytes]:
        for chunk in (b"step 1\n", b"step 2\n", b"done\n"):
            produced.append(chunk)
            yield chunk

    api.add("GET", "/v1/jobs/j-1/logs", lambda request: httpx.Response(200, content=chunks()))

    stream = client.follow_logs("j-1", offset=4)
    first = next(stream)

    # Streaming, not buffering: the consumer has the first chunk before the second exists.
    assert first == b"step 1\n"
    assert produced == [b"step 1\n"]
    assert b"".join([first, *stream]) == b"step 1\nstep 2\ndone\n"
    assert dict(api.last.url.params) == {"offset": "4", "follow": "true"}


def test_follow_logs_has_no_read_timeout(api: FakeApi, client: Client) -> None:
    api.add("GET", "/v1/jobs/j-1/logs", content=b"")

    assert list(client.follow_logs("j-1")) == []
    assert api.last.extensions["timeout"]["read"] is None


def test_follow_logs_error_maps_before_streaming(api: FakeApi, client: Client) -> None:
    api.fail("GET", "/v1/jobs/nope/logs", 404, "not_found", "job nope not found")

    with pytest.raises(NotFound, match="job nope not found"):
        list(client.follow_logs("nope"))
