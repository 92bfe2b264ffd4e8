"""``GET /v1/jobs/{id}/why`` for a queued job: its place in its team's queue, what it waits
for (other teams' jobs only counted, unless the caller may read them) and its estimated start,
forecast by running the scheduler forward from the controller's last cycle."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from support.apikit import Api

HOLD = 'while [ ! -f "$MARKS/release" ]; do sleep 0.05; done'


def h100(gpus: int) -> dict[str, Any]:
    return {"gpus": gpus, "gpu_types": ["h100"]}


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


@pytest.fixture
def full_h100(api: Api, open_dir: Path) -> dict[str, str]:
    """The 4 h100s held: alice's a1 (2 GPUs, 600 s limit), bob's b1 and b2 (1 GPU each, 300 s
    and 900 s limits); then alice's a2 (2 GPUs: team-a may not borrow) and bob's b3 (1 GPU)
    wait."""
    env = {"MARKS": str(open_dir)}
    hold = ["sh", "-c", HOLD]
    jobs = {"a1": api.submit("alice", command=hold, env=env, resources=h100(2), max_runtime_s=600)}
    api.tick_until(lambda: api.status(str(jobs["a1"]["id"])) == "running", what="a1 runs")
    for name, limit in (("b1", 300), ("b2", 900)):
        jobs[name] = api.submit(
            "bob", command=hold, env=env, resources=h100(1), max_runtime_s=limit
        )
    running = ("a1", "b1", "b2")
    api.tick_until(
        lambda: all(api.status(str(jobs[n]["id"])) == "running" for n in running), what="all run"
    )
    jobs["a2"] = api.submit("alice", command=hold, env=env, resources=h100(2))
    jobs["b3"] = api.submit("bob", command=hold, env=env, resources=h100(1))
    for _ in range(3):
        api.runtime.controller.tick()
    ids = {name: str(job["id"]) for name, job in jobs.items()}
    yield ids
    (open_dir / "release").touch()


def why(api: Api, user: str, job_id: str) -> dict[str, Any]:
    response = api.client.get(f"/v1/jobs/{job_id}/why", headers=api.as_(user))
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def started(api: Api, job_id: str) -> float:
    return at(str(api.job("admin", job_id)["started_at"]))


def test_estimated_start_from_runtime_limits(api: Api, full_h100: dict[str, str]) -> None:
    ids = full_h100
    b3 = why(api, "bob", ids["b3"])
    assert (b3["queue_position"], b3["queue_length"]) == (1, 1)
    estimate = b3["estimate"]
    # b1 (300 s limit) is the first to end: b3 takes its GPU
    assert at(estimate["start_at"]) == pytest.approx(started(api, ids["b1"]) + 300, abs=1.0)
    assert estimate["method"] == "runtime limits"
    assert estimate["pool"] == "demo-shared-dev-h100-pool"
    running = [b for b in b3["waits_for"] if b["kind"] == "running"]
    assert running == [
        {
            "kind": "running",
            "message": "1 running job(s) holding 1 GPUs on demo-shared-dev-h100-pool end first",
            "count": 1,
            "gpus": 1,
            "gpu_type": "h100",
            "jobs": [ids["b1"]],
        }
    ]

    a2 = why(api, "alice", ids["a2"])
    assert at(a2["estimate"]["start_at"]) == pytest.approx(started(api, ids["a1"]) + 600, abs=1.0)
    kinds = {b["kind"]: b for b in a2["waits_for"]}
    assert set(kinds) >= {"quota", "running", "queued"}
    # bob's b1 ends before a2 starts, and b3 starts first: counted, never named to alice
    assert kinds["running"]["jobs"] == [ids["a1"]]
    assert "(1 of teams you cannot see)" in kinds["running"]["message"]
    assert kinds["queued"] == {
        "kind": "queued",
        "message": "1 queued job(s) of other teams are forecast to start before it "
        "(1 of teams you cannot see)",
        "count": 1,
        "gpus": 0,
        "gpu_type": None,
        "jobs": [],
    }
    body = str(a2)
    assert ids["b1"] not in body and ids["b3"] not in body

    seen_by_admin = {b["kind"]: b for b in why(api, "admin", ids["a2"])["waits_for"]}
    assert set(seen_by_admin["running"]["jobs"]) == {ids["a1"], ids["b1"]}
    assert seen_by_admin["queued"]["jobs"] == [ids["b3"]]


def test_position_counts_the_jobs_ahead_in_the_team(api: Api, full_h100: dict[str, str]) -> None:
    later = api.submit("bob", resources=h100(1))["id"]
    report = why(api, "bob", str(later))
    assert (report["queue_position"], report["queue_length"]) == (2, 2)
    ahead = [b for b in report["waits_for"] if b["kind"] == "queue"]
    assert ahead[0]["count"] == 1
    # submitted after the last cycle: no forecast yet, and it says so
    assert report["estimate"]["start_at"] is None
    assert "has not considered it yet" in report["estimate"]["basis"]


def test_a_running_job_has_no_position_or_estimate(api: Api, full_h100: dict[str, str]) -> None:
    report = why(api, "alice", full_h100["a1"])
    assert report["queue_position"] is None and report["estimate"] is None
    assert report["waits_for"] == []
