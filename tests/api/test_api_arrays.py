"""Job arrays over the API: one request, one transaction, per-task env, cancel, grouping."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpupool.config import ServerLimits
from gpupool.state.db import IntegrityError
from support.apikit import Api, make_api

H100 = {"gpus": 1, "gpu_types": ["h100"]}


def submit_array(api: Api, user: str, array: str, **body: Any) -> dict[str, Any]:
    body.setdefault("command", ["true"])
    body.setdefault("resources", H100)
    response = api.client.post("/v1/arrays", json={**body, "array": array}, headers=api.as_(user))
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def jobs(api: Api, **params: Any) -> dict[str, Any]:
    response = api.client.get("/v1/jobs", params={"limit": 500, **params}, headers=api.as_("admin"))
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


@pytest.fixture
def small(tmp_path: Path, demo_path: Path) -> Iterator[Api]:
    """A server whose arrays hold at most 10 tasks."""
    built = make_api(tmp_path / "home", demo_path, limits=ServerLimits(max_array_tasks=10))
    try:
        yield built
    finally:
        built.client.close()
        built.runtime.close()


def test_an_array_is_answered_compactly_and_its_tasks_are_jobs(api: Api) -> None:
    array = submit_array(api, "alice", "0-9:2")
    assert array["count"] == 5 and (array["first_index"], array["last_index"]) == (0, 8)
    assert array["counts"] == {"queued": 5} and array["team"] == "team-a"
    assert "items" not in array  # no task bodies in the answer
    tasks = jobs(api, array=array["id"])["items"]
    assert sorted(t["id"] for t in tasks) == [f"{array['id']}_{i}" for i in (0, 2, 4, 6, 8)]
    assert {t["array_id"] for t in tasks} == {array["id"]}
    assert sorted(t["array_index"] for t in tasks) == [0, 2, 4, 6, 8]
    one = api.job("alice", f"{array['id']}_4")
    assert one["status"] == "queued" and one["command"] == ["true"]
    again = api.client.get(f"/v1/arrays/{array['id']}", headers=api.as_("alice")).json()
    assert again["count"] == 5 and again["counts"] == {"queued": 5}


@dataclass
class BadArray:
    array: Any
    want_in_message: str
    resources: dict[str, Any] | None = None


BAD = [
    pytest.param(BadArray("0-10", "more than 10 tasks"), id="past the server's task limit"),
    pytest.param(BadArray("0-5,6-11", "more than 10 tasks"), id="past the limit over items"),
    pytest.param(BadArray("5-1", "low to high"), id="range backwards"),
    pytest.param(BadArray("0-9:0", "step"), id="zero step"),
    pytest.param(BadArray("one,two", "not an index"), id="not numbers"),
    pytest.param(BadArray("-1", "not an index"), id="negative index"),
    pytest.param(BadArray("0-9%2", "not an index"), id="slurm throttle is not supported"),
]


@pytest.mark.parametrize("case", BAD)
def test_an_invalid_array_is_refused_naming_array_and_stores_nothing(
    small: Api, case: BadArray
) -> None:
    response = small.client.post(
        "/v1/arrays",
        json={"command": ["true"], "array": case.array, "resources": H100},
        headers=small.as_("alice"),
    )
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert [d["field"] for d in error["details"]] == ["array"]
    assert case.want_in_message in error["details"][0]["message"]
    assert jobs(small)["items"] == []


def test_an_array_whose_job_is_invalid_stores_no_task(small: Api) -> None:
    response = small.client.post(
        "/v1/arrays",
        json={"command": ["true"], "array": "0-9", "resources": {"gpu_types": ["a100"]}},
        headers=small.as_("alice"),
    )
    assert response.status_code == 422
    assert jobs(small)["items"] == []


def test_a_task_that_cannot_be_stored_rolls_the_whole_array_back(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = submit_array(api, "alice", "3")
    # Force the next array's id to collide with the stored task's id at index 3 only: the
    # insert fails after other tasks were sent, and none of them may remain.
    import gpupool.server.services.jobs as service

    token = taken["id"][2:]
    monkeypatch.setattr(service.secrets, "token_hex", lambda _n=6: token)
    with pytest.raises(IntegrityError):  # the test client re-raises the server's error
        api.client.post(
            "/v1/arrays",
            json={"command": ["true"], "array": "0-5", "resources": H100},
            headers=api.as_("alice"),
        )
    monkeypatch.undo()
    assert [j["id"] for j in jobs(api)["items"]] == [f"{taken['id']}_3"]


def test_the_idempotency_key_names_the_whole_array(api: Api) -> None:
    headers = {**api.as_("alice"), "Idempotency-Key": "sweep-1"}
    body = {"command": ["true"], "array": "0-99", "resources": H100}
    first = api.client.post("/v1/arrays", json=body, headers=headers)
    again = api.client.post("/v1/arrays", json=body, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"] and again.json()["count"] == 100
    other = api.client.post("/v1/arrays", json={**body, "array": "0-9"}, headers=headers)
    assert other.status_code == 422 and "sweep-1" not in other.text
    single = api.client.post("/v1/jobs", json={"command": ["true"]}, headers=headers)
    assert single.status_code == 422
    assert len(jobs(api)["items"]) == 100


def test_each_task_sees_its_array_id_and_index(api: Api) -> None:
    show = 'echo "array=$GPUPOOL_ARRAY_JOB_ID index=$GPUPOOL_ARRAY_INDEX"'
    array = submit_array(api, "alice", "4,7", command=["sh", "-c", show], resources={"gpus": 0})
    ids = {i: f"{array['id']}_{i}" for i in (4, 7)}
    api.tick_until(
        lambda: all(api.status(j) == "succeeded" for j in ids.values()), what="both tasks ran"
    )
    for index, job_id in ids.items():
        logs = api.client.get(f"/v1/jobs/{job_id}/logs", headers=api.as_("alice")).text
        assert f"array={array['id']} index={index}" in logs


def test_a_single_job_gets_no_array_variables(api: Api) -> None:
    show = 'echo "[${GPUPOOL_ARRAY_JOB_ID-unset}]"'
    job = api.submit("alice", command=["sh", "-c", show], resources={"gpus": 0})["id"]
    api.tick_until(lambda: api.status(job) == "succeeded", what="job ran")
    assert "[unset]" in api.client.get(f"/v1/jobs/{job}/logs", headers=api.as_("alice")).text


def test_cancel_applies_to_the_whole_array_or_to_one_task(api: Api) -> None:
    whole = submit_array(api, "alice", "0-3")
    some = submit_array(api, "alice", "0-3")
    one = api.client.post(f"/v1/jobs/{some['id']}_2/cancel", headers=api.as_("alice"))
    assert one.status_code == 200 and one.json()["status"] == "cancelled"
    counts = api.client.get(f"/v1/arrays/{some['id']}", headers=api.as_("alice")).json()["counts"]
    assert counts == {"queued": 3, "cancelled": 1}

    refused = api.client.post(f"/v1/arrays/{whole['id']}/cancel", headers=api.as_("bob"))
    assert refused.status_code == 403
    done = api.client.post(f"/v1/arrays/{whole['id']}/cancel", headers=api.as_("alice"))
    assert done.status_code == 200 and done.json()["counts"] == {"cancelled": 4}
    api.runtime.controller.tick()
    assert api.status(f"{whole['id']}_0") == "cancelled"
    missing = api.client.post("/v1/arrays/a-000000000000/cancel", headers=api.as_("alice"))
    assert missing.status_code == 404


def test_cancel_of_a_running_array_asks_each_running_task_to_stop(api: Api, open_dir: Path) -> None:
    wait = ["sh", "-c", "while true; do sleep 0.05; done"]
    array = submit_array(api, "alice", "0-1", command=wait, resources={"gpus": 0})
    tasks = [f"{array['id']}_{i}" for i in (0, 1)]
    api.tick_until(lambda: all(api.status(t) == "running" for t in tasks), what="tasks run")
    api.client.post(f"/v1/arrays/{array['id']}/cancel", headers=api.as_("alice"))
    api.tick_until(lambda: all(api.status(t) == "cancelled" for t in tasks), what="tasks stop")


def test_a_grouped_listing_shows_an_array_once_with_counts(api: Api) -> None:
    single = api.submit("alice", resources=H100)["id"]
    array = submit_array(api, "alice", "0-2")
    api.client.post(f"/v1/jobs/{array['id']}_1/cancel", headers=api.as_("alice"))

    assert len(jobs(api)["items"]) == 4  # ungrouped: every task
    grouped = jobs(api, group="true")
    assert [j["id"] for j in grouped["items"]] == [f"{array['id']}_0", single]
    assert grouped["arrays"] == {array["id"]: {"queued": 2, "cancelled": 1}}

    cancelled = jobs(api, group="true", status="cancelled")
    assert [j["id"] for j in cancelled["items"]] == [f"{array['id']}_1"]
    paged = jobs(api, group="true", limit=1)
    assert [j["id"] for j in paged["items"]] == [f"{array['id']}_0"]
    rest = jobs(api, group="true", limit=1, cursor=paged["next_cursor"])
    assert [j["id"] for j in rest["items"]] == [single]
