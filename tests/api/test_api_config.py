"""/v1/config: diff, apply (validated, versioned, audited, optimistic), history, pick-up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.state import config_store
from gpupool.state.models import AuditRow
from support.apikit import Api

Edit = Callable[[dict[str, Any]], None]


def edited(demo_path: Path, edit: Edit) -> str:
    data = yaml.safe_load(demo_path.read_text())
    edit(data)
    return yaml.safe_dump(data, sort_keys=False)


def raise_team_a_h100(data: dict[str, Any]) -> None:
    data["teams"]["team-a"]["quota"]["h100"]["nominal"] = 4


def drop_team_c(data: dict[str, Any]) -> None:
    del data["teams"]["team-c"]


def drop_t4_pool(data: dict[str, Any]) -> None:
    data["pools"] = [p for p in data["pools"] if p["name"] != "demo-shared-dev-t4-pool"]


def apply(api: Api, text: str, base: int = 0, user: str = "admin", force: bool = False) -> Any:
    body = {"yaml": text, "base_version": base, "force": force, "source": "test.yaml"}
    return api.client.post("/v1/config", json=body, headers=api.as_(user))


def stored_versions(api: Api) -> int:
    with api.runtime.sessions() as session:
        return config_store.current_version(session)


def test_diff_then_apply_stores_a_version_audits_it_and_takes_effect(
    api: Api, demo_path: Path
) -> None:
    text = edited(demo_path, raise_team_a_h100)
    shown = api.client.post("/v1/config/diff", json={"yaml": text}, headers=api.as_("admin"))
    assert shown.status_code == 200, shown.text
    diff = shown.json()
    assert diff["base_version"] == 0
    assert diff["text"] == "teams\n  ~ team-a quota.h100.nominal: 2 -> 4"
    assert diff["jobs_in_use"] == []

    done = apply(api, text)
    assert done.status_code == 200, done.text
    assert done.json()["version"] == 1 and done.json()["applied"] is True
    assert api.runtime.current_config().teams["team-a"].quota["h100"].nominal == 4

    current = api.client.get("/v1/config", headers=api.as_("admin")).json()
    assert current["version"] == 1 and current["yaml"] == text
    assert current["applied_by"] == "admin" and current["source"] == "test.yaml"
    history = api.client.get("/v1/config/versions", headers=api.as_("admin")).json()
    assert [v["version"] for v in history["items"]] == [1]
    assert history["items"][0]["summary"] == "teams: ~1"
    with api.runtime.sessions() as session:
        row = session.query(AuditRow).filter(AuditRow.action == "config.apply").one()
    assert (row.actor, row.outcome, row.target) == ("admin", "ok", "version 1: teams: ~1")


def test_applying_the_same_file_again_stores_nothing(api: Api, demo_path: Path) -> None:
    done = apply(api, demo_path.read_text())
    assert done.status_code == 200, done.text
    assert done.json()["applied"] is False and done.json()["diff"]["text"] == "no changes"
    assert stored_versions(api) == 0


def test_a_stale_base_version_is_refused_with_409(api: Api, demo_path: Path) -> None:
    first = apply(api, edited(demo_path, raise_team_a_h100), base=0)
    assert first.status_code == 200
    # A second apply diffed against version 0 too: refused, nothing stored.
    second = apply(api, edited(demo_path, drop_t4_pool), base=0)
    assert second.status_code == 409, second.text
    error = second.json()["error"]
    assert error["details"]["reason"] == "stale_version"
    assert error["details"]["current_version"] == 1
    assert stored_versions(api) == 1


def test_an_invalid_file_is_refused_with_its_problems_and_changes_nothing(
    api: Api, demo_path: Path
) -> None:
    before = api.runtime.current_config()
    text = demo_path.read_text().replace("gpu_type: t4", "gpu_type: a100", 1)
    done = apply(api, text)
    assert done.status_code == 422, done.text
    error = done.json()["error"]
    assert "nothing was changed" in error["message"]
    [problem] = error["details"]
    assert problem["path"] == "pools[1].gpu_type" and problem["line"] and problem["hint"]
    assert stored_versions(api) == 0
    assert api.runtime.current_config() == before


@dataclass(frozen=True)
class Refused:
    user: str
    method: str
    path: str


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(Refused("alice", "POST", "/v1/config"), id="a member cannot apply"),
        pytest.param(Refused("carol", "POST", "/v1/config"), id="a team admin cannot apply"),
        pytest.param(Refused("carol", "POST", "/v1/config/diff"), id="a team admin cannot diff"),
        pytest.param(Refused("vera", "GET", "/v1/config"), id="a viewer cannot read it"),
        pytest.param(Refused("bob", "GET", "/v1/config/versions"), id="nor its history"),
    ],
)
def test_only_platform_admins_see_or_change_the_configuration(
    api: Api, demo_path: Path, case: Refused
) -> None:
    body: dict[str, object] = {"yaml": edited(demo_path, raise_team_a_h100)}
    if case.path == "/v1/config":
        body["base_version"] = 0
    answer = api.client.request(
        case.method,
        case.path,
        json=body if case.method == "POST" else None,
        headers=api.as_(case.user),
    )
    assert answer.status_code == 403, answer.text
    assert stored_versions(api) == 0


def test_removing_a_team_with_queued_jobs_is_refused_naming_them_unless_forced(
    api: Api, demo_path: Path
) -> None:
    # team-c has no members in the demo: admin submits for it.
    job = api.submit("admin", team="team-c", resources={"gpus": 1, "gpu_types": ["h100"]})
    text = edited(demo_path, drop_team_c)
    diff = api.client.post("/v1/config/diff", json={"yaml": text}, headers=api.as_("admin"))
    assert [j["id"] for j in diff.json()["jobs_in_use"]] == [job["id"]]

    refused = apply(api, text)
    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert error["details"]["reason"] == "jobs_in_use"
    assert job["id"] in error["message"] and "--force" in error["message"]
    assert stored_versions(api) == 0 and api.status(str(job["id"])) == "queued"

    forced = apply(api, text, force=True)
    assert forced.status_code == 200, forced.text
    assert forced.json()["failed_jobs"] == 1
    failed = api.job("admin", str(job["id"]))
    assert failed["status"] == "failed"
    assert "team 'team-c' was removed by configuration version 1" in str(failed["message"])
    assert "team-c" not in api.runtime.current_config().teams


def test_a_forced_pool_removal_cancels_its_running_jobs_through_the_retired_backend(
    api: Api, demo_path: Path
) -> None:
    job = api.submit("alice", command=["sleep", "60"], resources={"gpus": 1, "gpu_types": ["t4"]})
    job_id = str(job["id"])
    api.tick_until(lambda: api.status(job_id) == "running", what="the t4 job to run")
    refused = apply(api, edited(demo_path, drop_t4_pool))
    assert refused.status_code == 409 and job_id in refused.json()["error"]["message"]

    forced = apply(api, edited(demo_path, drop_t4_pool), force=True)
    assert forced.status_code == 200 and forced.json()["cancelled_jobs"] == 1
    api.tick_until(lambda: api.status(job_id) == "cancelled", what="the job to be cancelled")


def test_a_raised_quota_starts_a_queued_job_without_restart(api: Api, demo_path: Path) -> None:
    job = api.submit("alice", resources={"gpus": 3, "gpu_types": ["h100"]})
    job_id = str(job["id"])
    for _ in range(3):
        api.runtime.controller.tick()
    assert api.status(job_id) == "queued"  # nominal 2, no borrowing
    assert apply(api, edited(demo_path, raise_team_a_h100)).status_code == 200
    api.tick_until(lambda: api.status(job_id) != "queued", what="the job to be admitted")


def test_a_forced_removal_settles_every_job_not_only_those_the_diff_lists(
    api: Api, demo_path: Path
) -> None:
    # More queued jobs than a diff lists (1,000): the removal must fail all of them.
    body = {"command": ["true"], "team": "team-c", "array": "0-1004"}
    body["resources"] = {"gpus": 1, "gpu_types": ["h100"]}
    made = api.client.post("/v1/arrays", json=body, headers=api.as_("admin"))
    assert made.status_code == 201, made.text
    text = edited(demo_path, drop_team_c)
    diff = api.client.post("/v1/config/diff", json={"yaml": text}, headers=api.as_("admin"))
    assert len(diff.json()["jobs_in_use"]) == 1000

    forced = apply(api, text, force=True)
    assert forced.status_code == 200, forced.text
    assert forced.json()["failed_jobs"] == 1005
    with api.runtime.sessions() as session:
        left = config_store.jobs_in_use(session, ["team-c"], [], limit=None)
    assert left == []
