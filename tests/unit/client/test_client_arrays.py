"""Job arrays through the SDK (sync and async): the request sent and the compact answer."""

from __future__ import annotations

import asyncio
import json

import pytest

from gpupool.client.async_sdk import AsyncClient
from gpupool.client.errors import InvalidRequest
from gpupool.client.sdk import Client
from gpupool.client.testing import FakeApi, array_json, job_json

URL = "http://gpupool.test"


def test_submit_array_sends_the_spec_with_the_job_and_the_key_as_a_header(
    api: FakeApi, client: Client
) -> None:
    api.add("POST", "/v1/arrays", json=array_json(id="a-1"), status=201)
    array = client.submit_array(
        "0-999", ["python", "sweep.py"], team="team-a", gpus=0, idempotency_key="k-1"
    )
    assert (array.id, array.count, array.counts) == ("a-1", 1000, {"queued": 1000})
    assert array.task_id(7) == "a-1_7"
    assert api.last_json() == {
        "command": ["python", "sweep.py"],
        "team": "team-a",
        "resources": {"gpus": 0, "nodes": 1},
        "array": "0-999",
    }
    assert api.last.headers["Idempotency-Key"] == "k-1"


@pytest.mark.parametrize(
    ("array", "options", "message"),
    [
        pytest.param(range(10), {}, "string of indices", id="array not a string"),
        pytest.param("0-9", {"gpu": 1}, "unexpected options: gpu", id="misspelt option"),
    ],
)
def test_submit_array_refuses_bad_arguments_before_sending(
    api: FakeApi, client: Client, array: object, options: dict[str, object], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        client.submit_array(array, ["true"], **options)  # type: ignore[arg-type]
    assert api.requests == []


def test_an_invalid_array_comes_back_as_invalid_request_naming_array(
    api: FakeApi, client: Client
) -> None:
    api.fail(
        "POST",
        "/v1/arrays",
        422,
        "invalid_request",
        "invalid array: 5-1: a range goes from low to high",
        [{"field": "array", "message": "5-1: a range goes from low to high, e.g. 1-5"}],
    )
    with pytest.raises(InvalidRequest) as caught:
        client.submit_array("5-1", ["true"])
    assert "array" in str(caught.value)


def test_cancel_and_read_an_array_and_list_it_grouped(api: FakeApi, client: Client) -> None:
    api.add("POST", "/v1/arrays/a-1/cancel", json=array_json(id="a-1", counts={"cancelled": 3}))
    api.add("GET", "/v1/arrays/a-1", json=array_json(id="a-1", counts={"cancelled": 3}))
    page = {
        "items": [job_json(id="a-1_0", array_id="a-1", array_index=0)],
        "next_cursor": None,
        "arrays": {"a-1": {"queued": 2, "running": 1}},
    }
    api.add("GET", "/v1/jobs", json=page)
    assert client.cancel_array("a-1").counts == {"cancelled": 3}
    assert client.array("a-1").counts == {"cancelled": 3}
    listed = client.jobs(group=True)
    assert api.last.url.params["group"] == "true"
    assert listed.items[0].array_id == "a-1" and listed.arrays["a-1"]["running"] == 1
    client.jobs(array="a-1")
    assert api.last.url.params["array"] == "a-1" and "group" not in api.last.url.params


def test_async_client_submits_reads_and_cancels_arrays(api: FakeApi) -> None:
    api.add("POST", "/v1/arrays", json=array_json(id="a-2", count=5), status=201)
    api.add("GET", "/v1/arrays/a-2", json=array_json(id="a-2", count=5))
    api.add("POST", "/v1/arrays/a-2/cancel", json=array_json(id="a-2", counts={"cancelled": 5}))

    async def scenario() -> tuple[int, int, dict[str, int]]:
        async with AsyncClient(URL, "t", transport=api.transport) as sdk:
            made = await sdk.submit_array("0-9:2", ["true"], gpus=0)
            read = await sdk.array(made.id)
            cancelled = await sdk.cancel_array(made.id)
            return made.count, read.count, cancelled.counts

    assert asyncio.run(scenario()) == (5, 5, {"cancelled": 5})
    assert json.loads(api.requests[0].content)["array"] == "0-9:2"
