"""Submitting jobs: validation, server-owned fields, idempotency, nothing half-written."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from support.apikit import Api


def job_count(api: Api) -> int:
    response = api.client.get("/v1/jobs", headers=api.as_("admin"))
    return len(response.json()["items"])


def test_submit_returns_a_queued_job_with_server_fields(api: Api) -> None:
    job = api.submit("alice", command=["echo", "hi"], resources={"gpus": 1, "gpu_types": ["h100"]})
    assert job["status"] == "queued"
    assert job["team"] == "team-a"  # alice belongs to one team: it is implied
    assert job["user"] == "alice"
    assert job["priority_class"] == "training"
    assert job["priority"] == 100
    assert job["attempt"] == 0
    assert str(job["id"]).startswith("j-")


def test_submit_keeps_the_checkpoint_interval(api: Api) -> None:
    job = api.submit("alice", command=["true"], checkpoint_interval_s=900)
    assert job["checkpoint_interval_s"] == 900
    shown = api.client.get(f"/v1/jobs/{job['id']}", headers=api.as_("alice")).json()
    assert shown["checkpoint_interval_s"] == 900
    assert api.submit("alice", command=["true"])["checkpoint_interval_s"] is None


@dataclass
class Bad:
    body: dict[str, Any]
    want_fields: set[str]
    want_in_message: str = ""
    user: str = "alice"
    extra: dict[str, Any] = field(default_factory=dict)


BAD = [
    pytest.param(
        Bad(
            {"command": ["true"], "status": "running", "pool": "x", "handle": {}, "attempts": []},
            {"status", "pool", "handle", "attempts"},
            "set by the server",
        ),
        id="every server-owned field is named",
    ),
    pytest.param(
        Bad({"command": ["true"], "colour": "red"}, {"colour"}, "unknown field"), id="unknown field"
    ),
    pytest.param(Bad({"command": []}, {"command"}), id="empty command"),
    pytest.param(
        Bad({"command": ["true"], "resources": {"gpus": "many"}}, {"resources.gpus"}),
        id="wrong type",
    ),
    pytest.param(
        Bad(
            {"command": ["true"], "resources": {"gpus": 1, "gpu_types": ["a100"]}},
            {"resources.gpu_types"},
            "a100",
        ),
        id="unknown gpu type",
    ),
    pytest.param(
        Bad({"command": ["true"], "resources": {"gpus": 8}}, {"resources"}, "largest pool"),
        id="no node could ever hold it",
    ),
    pytest.param(
        Bad({"command": ["true"], "priority_class": "urgent"}, {"priority_class"}, "training"),
        id="unknown priority class",
    ),
    pytest.param(
        Bad(
            {"command": ["true"], "env": {"GPUPOOL_TEAM": "team-b"}},
            {"env.GPUPOOL_TEAM"},
            "reserved",
        ),
        id="reserved env variable",
    ),
    pytest.param(
        Bad({"command": ["true"], "team": "team-z"}, {"team"}, "known teams"), id="unknown team"
    ),
    pytest.param(
        Bad({"command": ["true"], "checkpoint_interval_s": 0}, {"checkpoint_interval_s"}),
        id="checkpoint interval of 0 s",
    ),
    pytest.param(
        Bad({"command": ["true"]}, {"team"}, "name the team", user="admin"),
        id="team required when the user has no single team",
    ),
]


@pytest.mark.parametrize("case", BAD)
def test_bad_submit_is_rejected_naming_each_field_and_writes_nothing(api: Api, case: Bad) -> None:
    response = api.client.post("/v1/jobs", json=case.body, headers=api.as_(case.user))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    assert {d["field"] for d in error["details"]} == case.want_fields
    assert case.want_in_message in str(error["details"])
    assert "Traceback" not in response.text
    assert job_count(api) == 0


def test_same_idempotency_key_returns_the_same_job(api: Api) -> None:
    headers = {**api.as_("alice"), "Idempotency-Key": "run-42"}
    first = api.client.post("/v1/jobs", json={"command": ["true"]}, headers=headers)
    second = api.client.post("/v1/jobs", json={"command": ["true"]}, headers=headers)
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]
    in_body = api.client.post(
        "/v1/jobs",
        json={"command": ["true"], "idempotency_key": "run-42"},
        headers=api.as_("alice"),
    )
    assert in_body.json()["id"] == first.json()["id"]
    assert job_count(api) == 1


def test_idempotency_keys_are_per_user(api: Api) -> None:
    a = api.client.post(
        "/v1/jobs", json={"command": ["true"]}, headers={**api.as_("alice"), "Idempotency-Key": "k"}
    )
    b = api.client.post(
        "/v1/jobs", json={"command": ["true"]}, headers={**api.as_("bob"), "Idempotency-Key": "k"}
    )
    assert a.json()["id"] != b.json()["id"]


def test_list_pages_with_a_cursor(api: Api) -> None:
    ids = {api.submit("alice", name=f"j{i}")["id"] for i in range(5)}
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = api.client.get("/v1/jobs", params=params, headers=api.as_("alice")).json()
        seen += [j["id"] for j in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 5 and set(seen) == ids


def test_bad_cursor_and_status_filter_are_422(api: Api) -> None:
    bad_cursor = api.client.get("/v1/jobs", params={"cursor": "xx"}, headers=api.as_("alice"))
    bad_status = api.client.get("/v1/jobs", params={"status": "zzz"}, headers=api.as_("alice"))
    assert bad_cursor.status_code == 422 and bad_status.status_code == 422
    assert bad_status.json()["error"]["details"][0]["field"] == "status"
