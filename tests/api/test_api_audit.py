"""The audit trail: every mutation recorded with its outcome; who may read which entries."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpupool.config import ServerLimits
from support.apikit import Api, make_api


@dataclass
class Mutation:
    user: str | None
    path: str  # {alice_job} is replaced by a job of alice (team-a)
    body: dict[str, Any] | None
    want_status: int
    want: dict[str, Any]  # fields of the newest audit entry


MUTATIONS = [
    pytest.param(
        Mutation(
            "alice",
            "/v1/jobs",
            {"command": ["true"]},
            201,
            {"actor": "alice", "action": "job.submit", "team": "team-a", "outcome": "ok"},
        ),
        id="submit is recorded with the new job as target",
    ),
    pytest.param(
        Mutation(
            "vera",
            "/v1/jobs",
            {"command": ["true"], "team": "team-a"},
            403,
            {"actor": "vera", "action": "job.submit", "team": "team-a", "outcome": "forbidden"},
        ),
        id="a viewer's refused submit is recorded",
    ),
    pytest.param(
        Mutation(
            "alice",
            "/v1/jobs",
            {"command": ["true"], "status": "running"},
            422,
            {"actor": "alice", "action": "job.submit", "outcome": "invalid_request"},
        ),
        id="an invalid body is recorded",
    ),
    pytest.param(
        Mutation(
            "bob",
            "/v1/jobs/{alice_job}/cancel",
            None,
            403,
            {"actor": "bob", "action": "job.cancel", "team": "team-a", "outcome": "forbidden"},
        ),
        id="another team's cancel is recorded under the job's team",
    ),
    pytest.param(
        Mutation(
            "carol",
            "/v1/jobs/{alice_job}/cancel",
            None,
            200,
            {"actor": "carol", "action": "job.cancel", "team": "team-a", "outcome": "ok"},
        ),
        id="a team admin's cancel is recorded",
    ),
    pytest.param(
        Mutation(
            "alice",
            "/v1/jobs/j-missing/cancel",
            None,
            404,
            {"action": "job.cancel", "target": "j-missing", "team": None, "outcome": "not_found"},
        ),
        id="a cancel of a missing job is recorded",
    ),
]


def entries(api: Api, user: str = "admin", **params: Any) -> dict[str, Any]:
    response = api.client.get("/v1/audit", params=params, headers=api.as_(user))
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", MUTATIONS)
def test_mutations_are_recorded(api: Api, case: Mutation) -> None:
    alice_job = api.submit("alice")["id"]
    path = case.path.format(alice_job=alice_job)
    response = api.client.post(path, json=case.body, headers=api.as_(case.user))
    assert response.status_code == case.want_status, response.text
    newest = entries(api, limit=1)["items"][0]
    assert newest["status"] == case.want_status
    assert {k: newest[k] for k in case.want} == case.want
    if case.user is not None:
        assert newest["token_id"] == api.tokens[case.user].split("_")[1]
    if case.want_status < 300 and path.startswith("/v1/jobs/"):
        assert newest["target"] == alice_job
    if path == "/v1/jobs" and case.want_status == 201:
        assert newest["target"] == response.json()["id"]


def test_anonymous_refusals_are_counted_into_one_summary_row(
    tmp_path: Path, demo_path: Path
) -> None:
    api = make_api(tmp_path / "home", demo_path, limits=ServerLimits(audit_summary_s=0.3))
    try:
        with api.client:  # one event loop for every request, as in the server
            for _ in range(20):
                answer = api.client.post("/v1/jobs", json={"command": ["true"]})
                assert answer.status_code == 401
            assert entries(api)["items"] == []
            deadline = time.monotonic() + 10
            while not (items := entries(api)["items"]) and time.monotonic() < deadline:
                time.sleep(0.05)
        assert len(items) == 1
        summary = items[0]
        assert {k: summary[k] for k in ("actor", "action", "outcome", "status")} == {
            "actor": "-",
            "action": "job.submit",
            "outcome": "unauthenticated",
            "status": 401,
        }
        assert summary["target"].startswith("20 anonymous request(s) refused since ")
    finally:
        api.runtime.close()


def test_reads_are_not_recorded(api: Api) -> None:
    job = api.submit("alice")["id"]
    before = entries(api)["items"]
    api.client.get(f"/v1/jobs/{job}", headers=api.as_("alice"))
    api.client.get("/v1/jobs", headers=api.as_("bob"))
    api.client.post("/v1/no-such-route", headers=api.as_("bob"))
    assert entries(api)["items"] == before


@dataclass
class Reader:
    user: str
    params: dict[str, str]
    want_status: int
    want_teams: set[str | None] | None = None


READERS = [
    pytest.param(Reader("admin", {}, 200, {"team-a", "team-b", None}), id="platform admin: all"),
    pytest.param(Reader("carol", {}, 200, {"team-a"}), id="team admin: own team only"),
    pytest.param(Reader("carol", {"team": "team-a"}, 200, {"team-a"}), id="team admin filters"),
    pytest.param(Reader("carol", {"team": "team-b"}, 403), id="team admin, other team"),
    pytest.param(Reader("alice", {}, 403), id="member may not read"),
    pytest.param(Reader("vera", {}, 403), id="viewer may not read"),
    pytest.param(Reader("admin", {"team": "team-b"}, 200, {"team-b"}), id="filter by team"),
    pytest.param(Reader("admin", {"outcome": "forbidden"}, 200, {"team-a"}), id="by outcome"),
    pytest.param(Reader("admin", {"actor": "bob"}, 200, {"team-b"}), id="by actor"),
    pytest.param(Reader("admin", {"cursor": "!!"}, 422), id="bad cursor"),
]


@pytest.mark.parametrize("case", READERS)
def test_who_reads_which_entries(api: Api, case: Reader) -> None:
    api.submit("alice")
    api.submit("bob")
    api.client.post("/v1/jobs/j-missing/cancel", headers=api.as_("alice"))  # no team
    api.client.post(
        "/v1/jobs", json={"command": ["true"], "team": "team-a"}, headers=api.as_("vera")
    )
    response = api.client.get("/v1/audit", params=case.params, headers=api.as_(case.user))
    assert response.status_code == case.want_status, response.text
    if case.want_teams is not None:
        assert {e["team"] for e in response.json()["items"]} == case.want_teams


def test_pages_follow_the_cursor_newest_first(api: Api) -> None:
    for _ in range(5):
        api.submit("alice")
    seen, cursor = [], None
    while True:
        page = entries(api, limit=2, **({"cursor": cursor} if cursor else {}))
        seen += [e["id"] for e in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 5
    assert seen == sorted(seen, reverse=True)


def test_time_window(api: Api) -> None:
    api.submit("alice")
    at = entries(api)["items"][0]["at"]
    assert len(entries(api, since=at)["items"]) == 1
    assert entries(api, until=at)["items"] == []


def test_a_crash_is_recorded_as_internal(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi.testclient import TestClient

    def crash(*_args: object) -> None:
        raise RuntimeError("boom")

    job = api.submit("alice")["id"]
    monkeypatch.setattr(api.runtime.jobs, "cancel", crash)
    with TestClient(api.client.app, raise_server_exceptions=False) as client:
        response = client.post(f"/v1/jobs/{job}/cancel", headers=api.as_("alice"))
    assert response.status_code == 500
    newest = entries(api, limit=1)["items"][0]
    assert (newest["action"], newest["outcome"], newest["status"]) == (
        "job.cancel",
        "internal",
        500,
    )
