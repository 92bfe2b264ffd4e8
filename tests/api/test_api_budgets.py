"""Budgets end to end: a used-up ``hold`` budget keeps a team's new jobs queued and ``why`` says
so; ``no-borrow`` keeps it within nominal; alerts reach a real receiver while the controller
goes on; budgets are shown to team admins and set by platform admins as a new version."""

from __future__ import annotations

import difflib
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select, text

from gpupool.state import config_store
from gpupool.state.db import make_engine
from gpupool.state.models import AuditRow, Base, BudgetAlertRow, UsageHourRow
from support.apikit import Api, make_api
from support.receiver import SECRET, Receiver

HOUR_MS = 3_600_000


def write_config(tmp_path: Path, demo_path: Path, budgets: dict[str, list[dict[str, Any]]],
                 url: str = "http://127.0.0.1:9/hook") -> Path:  # fmt: skip
    data = yaml.safe_load(demo_path.read_text())
    for team, entries in budgets.items():
        data["teams"][team]["budgets"] = entries
    data["accounting"] = {
        "webhooks": [{"name": "ops", "url": url, "secret_env": "GPUPOOL_TEST_HOOK_SECRET"}]
    }
    path = tmp_path / "budgets.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest) -> str | None:
    """The store the enforcement tests run on: None for SQLite, else an emptied PostgreSQL."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_url")
    engine = make_engine(url)
    with engine.begin() as conn:
        Base.metadata.drop_all(conn)
        conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
    engine.dispose()
    return url


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[Api]]:
    made: list[Api] = []
    try:
        yield made
    finally:
        for api in made:
            api.client.close()
            api.runtime.close()


def server(
    started: list[Api], tmp_path: Path, config: Path, database_url: str | None = None
) -> Api:
    api = make_api(tmp_path / "home", config, database_url=database_url)
    started.append(api)
    with api.runtime.sessions.begin() as session:  # what `gpupool server --config` seeds
        config_store.append(
            session,
            base=0,
            text=config.read_text(),
            at=api.runtime.clock.now(),
            applied_by="test",
            source=str(config),
            summary="first version",
        )
    return api


def used(api: Api, team: str, gpu_hours: int) -> None:
    """Ledger rows as the controller's accrual writes them, this hour."""
    hour = api.runtime.clock.now().replace(minute=0, second=0, microsecond=0)
    with api.runtime.sessions.begin() as session:
        session.add(
            UsageHourRow(
                hour=hour,
                team=team,
                user="alice",
                gpu_type="h100",
                pool="demo-shared-dev-h100-pool",
                priority_class="training",
                node_type="dedicated",
                gpu_ms=gpu_hours * HOUR_MS,
                borrowed_gpu_ms=0,
            )
        )


def h100(api: Api, user: str, team: str) -> str:
    body = {
        "team": team,
        "command": ["sleep", "30"],
        "resources": {"gpus": 1, "gpu_types": ["h100"]},
    }
    return str(api.submit(user, **body)["id"])


def why(api: Api, job_id: str) -> list[dict[str, str]]:
    answer = api.client.get(f"/v1/jobs/{job_id}/why", headers=api.as_("admin"))
    assert answer.status_code == 200, answer.text
    return list(answer.json()["reasons"])


def month() -> str:
    now = datetime.now()
    return f"{now.strftime('%B')} {now.year}"


def test_a_team_over_a_hold_budget_keeps_its_new_jobs_queued_and_why_says_so(
    tmp_path: Path, demo_path: Path, started: list[Api], store: str | None
) -> None:
    budget = {"name": "monthly", "gpu_hours": 10, "enforcement": "hold"}
    config = write_config(tmp_path, demo_path, {"team-a": [budget]})
    api = server(started, tmp_path, config, store)
    used(api, "team-a", 12)
    held = h100(api, "alice", "team-a")
    other = h100(api, "bob", "team-b")
    api.tick_until(lambda: api.status(other) in ("admitted", "running"), what="team-b's job")
    api.tick_until(lambda: bool(why(api, held)), what="team-a's job to be considered")
    assert api.status(held) == "queued"
    (reason,) = why(api, held)
    assert reason["code"] == "budget"
    assert reason["message"] == (
        f"budget monthly: team-a used 12 of 10 GPU-h in {month()}; its new jobs wait until "
        f"{api.runtime.controller.budgets.blocks[0].until} or until an admin raises the budget"
    )
    with api.runtime.sessions() as session:
        alerts = session.scalars(select(BudgetAlertRow.threshold)).all()
        audit = session.scalars(select(AuditRow).where(AuditRow.action == "budget.alert")).all()
    assert sorted(alerts) == [50.0, 80.0, 100.0] and len(audit) == 3

    # An admin raises the budget: the hold ends at the next tick, not at the next month.
    raised = api.client.put(
        "/v1/budgets/team-a/monthly",
        json={"gpu_hours": 100, "enforcement": "hold"},
        headers=api.as_("admin"),
    )
    assert raised.status_code == 200, raised.text
    api.tick_until(lambda: api.status(held) in ("admitted", "running"), what="the held job")


def test_no_borrow_runs_a_team_only_within_its_nominal_quota(
    tmp_path: Path, demo_path: Path, started: list[Api], store: str | None
) -> None:
    budget = {"name": "monthly", "gpu_hours": 10, "enforcement": "no-borrow"}
    config = write_config(tmp_path, demo_path, {"team-b": [budget]})
    api = server(started, tmp_path, config, store)
    used(api, "team-b", 11)
    jobs = [h100(api, "bob", "team-b") for _ in range(3)]  # nominal 2; team-a's 2 are idle
    api.tick_until(
        lambda: sum(api.status(j) in ("admitted", "running") for j in jobs) == 2,
        what="two jobs within nominal",
    )
    for _ in range(5):
        api.runtime.controller.tick()
    waiting = [j for j in jobs if api.status(j) == "queued"]
    assert len(waiting) == 1
    codes = [r["code"] for r in why(api, waiting[0])]
    assert codes == ["quota", "budget"]
    assert (
        "runs only within its nominal h100 quota (no borrowing)"
        in why(api, waiting[0])[1]["message"]
    )


def test_alerts_reach_a_real_receiver_signed_while_the_controller_goes_on(
    tmp_path: Path, demo_path: Path, started: list[Api], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPOOL_TEST_HOOK_SECRET", SECRET)
    receiver = Receiver()
    receiver.hang = True  # the first delivery waits: the controller must not
    try:
        budget = {"name": "monthly", "gpu_hours": 10}
        config = write_config(tmp_path, demo_path, {"team-a": [budget]}, url=receiver.url)
        api = server(started, tmp_path, config)
        used(api, "team-a", 6)
        api.runtime.webhooks.start()
        api.runtime.controller.tick()  # 60 %: the 50 % alert is queued
        assert receiver.entered.wait(10), "the alert was not sent"
        started_at = time.monotonic()
        job = h100(api, "bob", "team-b")
        api.tick_until(lambda: api.status(job) in ("admitted", "running"), what="bob's job")
        assert time.monotonic() - started_at < 5 and not receiver.release.is_set()
        receiver.release.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            log = api.client.get("/v1/webhooks/deliveries", headers=api.as_("admin")).json()
            if log["items"]:
                break
            time.sleep(0.05)
    finally:
        receiver.close()
    (headers, body, valid), *_ = receiver.got
    assert valid and headers["X-Gpupool-Event"] == "budget.threshold"
    assert b'"threshold":50.0' in body and b'"team":"team-a"' in body
    (entry,) = log["items"]
    assert (entry["webhook"], entry["outcome"], entry["status_code"]) == ("ops", "delivered", 204)


def test_budget_set_stores_a_version_that_changes_one_line_and_team_admins_may_show_it(
    tmp_path: Path, demo_path: Path, started: list[Api]
) -> None:
    config = write_config(tmp_path, demo_path, {})
    api = server(started, tmp_path, config)
    body = {"gpu_hours": 1000, "enforcement": "no-borrow", "thresholds": [90]}
    refused = api.client.put("/v1/budgets/team-a/monthly", json=body, headers=api.as_("carol"))
    assert refused.status_code == 403
    done = api.client.put("/v1/budgets/team-a/monthly", json=body, headers=api.as_("admin"))
    assert done.status_code == 200, done.text
    assert done.json()["version"] == 2 and done.json()["applied"] is True
    with api.runtime.sessions() as session:
        stored = config_store.current(session)
        entry = session.scalars(
            select(AuditRow).where(AuditRow.action == "budget.set", AuditRow.outcome == "ok")
        ).one()
    assert stored is not None and stored.applied_by == "admin"
    changed = [
        line
        for line in difflib.ndiff(config.read_text().splitlines(), stored.text.splitlines())
        if line[:1] in "+-"
    ]
    assert changed == [
        "+     budgets: [{name: monthly, gpu_hours: 1000.0, thresholds: [90.0], enforcement: "
        "no-borrow}]"
    ]
    assert (entry.actor, entry.team, entry.target) == (
        "admin",
        "team-a",
        "team-a/monthly: version 2",
    )

    shown = api.client.get("/v1/budgets", params={"team": "team-a"}, headers=api.as_("carol"))
    assert shown.status_code == 200, shown.text
    (item,) = shown.json()["items"]
    assert (item["name"], item["limit"], item["used"], item["status"]) == ("monthly", 1000, 0, "ok")
    assert item["enforcement"] == "no-borrow" and item["unit"] == "GPU-h"
    member = api.client.get("/v1/budgets", params={"team": "team-a"}, headers=api.as_("alice"))
    assert member.status_code == 403
    assert api.client.get("/v1/budgets", headers=api.as_("alice")).json()["items"] == []
    # The auditor reads every team's budgets, and sets none.
    audited = api.client.get("/v1/budgets", headers=api.as_("audra"))
    assert sorted((i["team"], i["name"]) for i in audited.json()["items"]) == [
        ("team-a", "monthly"),
        ("team-b", "monthly"),
    ]
    one = api.client.get("/v1/budgets", params={"team": "team-a"}, headers=api.as_("audra"))
    assert one.status_code == 200 and one.json()["items"][0]["limit"] == 1000
    assert (
        api.client.put(
            "/v1/budgets/team-a/monthly", json=body, headers=api.as_("audra")
        ).status_code
        == 403
    )


@pytest.mark.parametrize(
    ("body", "field"),
    [
        pytest.param({"gpu_hours": 5, "amount": 5}, "teams.team-a.budgets[0]", id="two limits"),
        pytest.param(
            {"gpu_hours": 5, "enforcement": "stop"}, "enforcement", id="unknown enforcement"
        ),
        pytest.param({"gpu_hours": -1}, "gpu_hours", id="negative limit"),
        pytest.param({"gpu_hours": 5, "gpu_type": "a100"}, "gpu_type", id="unknown gpu type"),
    ],
)
def test_a_bad_budget_is_refused_naming_the_field(
    tmp_path: Path, demo_path: Path, started: list[Api], body: dict[str, Any], field: str
) -> None:
    api = server(started, tmp_path, write_config(tmp_path, demo_path, {}))
    answer = api.client.put("/v1/budgets/team-a/monthly", json=body, headers=api.as_("admin"))
    assert answer.status_code == 422, answer.text
    assert field in answer.text
    with api.runtime.sessions() as session:
        assert config_store.current_version(session) == 1


def test_teams_show_usage_this_month_its_share_and_the_budget_left(
    tmp_path: Path, demo_path: Path, started: list[Api]
) -> None:
    budgets = {"team-a": [{"name": "monthly", "gpu_hours": 40}, {"name": "tight", "gpu_hours": 10}]}
    api = server(started, tmp_path, write_config(tmp_path, demo_path, budgets))
    used(api, "team-a", 6)
    used(api, "team-b", 18)
    answer = api.client.get("/v1/teams", headers=api.as_("admin"))
    assert answer.status_code == 200, answer.text
    teams = {t["name"]: t for t in answer.json()["items"]}
    assert (teams["team-a"]["usage_gpu_hours"], teams["team-a"]["usage_share"]) == (6.0, 0.25)
    assert (teams["team-b"]["usage_gpu_hours"], teams["team-b"]["usage_share"]) == (18.0, 0.75)
    # The tightest budget is the one used the most: 6 of 10, not 6 of 40.
    a = teams["team-a"]
    assert (a["budget_remaining"], a["budget_unit"], a["budget_status"]) == (
        4.0,
        "GPU-h",
        "warning",
    )
    # team-b's demo budget is money: 2,000 USD less 18 h100 GPU-hours at 4.00.
    b = teams["team-b"]
    assert (b["budget_remaining"], b["budget_unit"], b["budget_status"]) == (1928.0, "USD", "ok")
    assert teams["team-c"]["budget_remaining"] is None
    # Budgets are for admins: a member sees the team's usage, not its budget.
    member = api.client.get("/v1/teams/team-a", headers=api.as_("alice")).json()
    assert member["usage_gpu_hours"] == 6.0 and member["budget_remaining"] is None
    admin = api.client.get("/v1/teams/team-a", headers=api.as_("carol")).json()
    assert admin["budget_remaining"] == 4.0
