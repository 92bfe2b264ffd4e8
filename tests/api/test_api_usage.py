"""GET /v1/usage and /v1/costs over ledger rows: JSON and CSV, who sees what, clear 422s."""

from __future__ import annotations

import csv
import io
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from support.apikit import Api
from support.ledger import LedgerBuilder

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
NOVEMBER = {"period": "month", "at": "2026-11-10"}
H100 = "demo-shared-dev-h100-pool"


@pytest.fixture
def ledger(api: Api) -> Api:
    built = LedgerBuilder()
    built.attempt(team="team-a", start=T0, end=T0 + timedelta(hours=2), gpus=2, borrowed=1)
    built.attempt(team="team-b", start=T0, end=T0 + timedelta(hours=1), user="bob")
    built.pool_capacity(H100, "h100", 4, [T0, T0 + timedelta(hours=1)])
    built.gap(datetime(2026, 11, 5, tzinfo=UTC), datetime(2026, 11, 5, 3, tzinfo=UTC))
    built.write(api.runtime.sessions)
    return api


def get(api: Api, path: str, user: str, **params: str) -> dict[str, object]:
    response = api.client.get(path, params=params, headers=api.as_(user))
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_admin_sees_every_team_and_idle(ledger: Api) -> None:
    body = get(ledger, "/v1/costs", "admin", **NOVEMBER)
    rows = {(r["team"], r["gpu_type"]): r for r in body["rows"]}  # type: ignore[attr-defined]
    assert rows["team-a", "h100"]["allocated_gpu_hours"] == 2.0
    assert rows["team-a", "h100"]["borrowed_gpu_hours"] == 2.0
    assert rows["team-a", "h100"]["total_cost"] == pytest.approx(16.0)
    # 8 GPU-hours of capacity, 5 used: 3 idle, on the pool's own row (idle_cost: unshared).
    assert rows["(idle)", "h100"]["idle_gpu_hours"] == 3.0
    assert rows["(idle)", "h100"]["pool"] == H100
    assert body["currency"] == "USD" and body["group_by"] == ["team", "gpu_type"]
    assert body["missing"] == [
        {
            "start": "2026-11-05T00:00:00Z",
            "end": "2026-11-05T03:00:00Z",
            "reason": "no controller was accruing",
        }
    ]


def test_members_see_their_team_only_and_the_auditor_sees_all(ledger: Api) -> None:
    mine = get(ledger, "/v1/usage", "vera", **NOVEMBER)
    assert {r["team"] for r in mine["rows"]} == {"team-a"}  # type: ignore[attr-defined]
    assert "allocated_cost" not in mine["rows"][0]  # type: ignore[index]
    audit = get(ledger, "/v1/costs", "audra", **NOVEMBER)
    assert {r["team"] for r in audit["rows"]} == {"team-a", "team-b", "(idle)"}  # type: ignore[attr-defined]
    refused = ledger.client.get("/v1/usage", params={"team": "team-a"}, headers=ledger.as_("bob"))
    assert refused.status_code == 403
    unknown = ledger.client.get("/v1/usage", params={"team": "nope"}, headers=ledger.as_("admin"))
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]["message"]


def test_the_auditor_changes_nothing(ledger: Api) -> None:
    response = ledger.client.post(
        "/v1/jobs", json={"command": ["true"], "team": "team-a"}, headers=ledger.as_("audra")
    )
    assert response.status_code == 403
    assert ledger.client.get("/v1/config", headers=ledger.as_("audra")).status_code == 403


def test_csv_by_accept_header_or_format(ledger: Api) -> None:
    response = ledger.client.get(
        "/v1/costs",
        params={**NOVEMBER, "group_by": "user"},
        headers={**ledger.as_("admin"), "Accept": "text/csv"},
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/csv")
    lines = response.text.splitlines()
    assert lines[0].startswith("# missing 2026-11-05")
    table = list(csv.DictReader(io.StringIO("\n".join(lines[1:]))))
    by_user = {r["user"]: r for r in table}
    assert float(by_user["alice"]["total_cost"]) == pytest.approx(16.0)
    assert by_user["(idle)"]["pool"] == H100 and by_user["bob"]["currency"] == "USD"
    detail = ledger.client.get(
        "/v1/usage",
        params={**NOVEMBER, "report": "attempts", "format": "csv"},
        headers=ledger.as_("carol"),
    )
    rows = list(csv.DictReader(line for line in detail.text.splitlines() if line[:1] != "#"))
    assert [(r["team"], r["allocated_gpu_hours"]) for r in rows] == [("team-a", "2.0")]


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ({"from": "2026-11-10", "to": "2026-11-01"}, "from", "after"),
        ({"group_by": "team,colour"}, "group_by", "team, user, gpu_type, pool, priority_class"),
        ({"from": "2020-01-01", "to": "2026-01-02"}, "to", "5 years"),
        ({"period": "fortnight"}, "period", "day, week, month, quarter, year"),
        ({"from": "yesterday"}, "from", "ISO 8601"),
        ({"period": "month", "at": "9999-12-31"}, "at", "outside"),
        ({"from": "0001-01-01", "to": "0001-02-01"}, "from", "outside"),
        ({"cursor": "x", "report": "attempts"}, "cursor", "next_cursor"),
    ],
)
def test_bad_queries_are_422_naming_the_field(
    api: Api, params: dict[str, str], field: str, words: str
) -> None:
    response = api.client.get("/v1/usage", params=params, headers=api.as_("admin"))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["details"][0]["field"] == field
    assert words in error["message"]


def test_whoami_says_who_is_an_auditor(api: Api) -> None:
    assert get(api, "/v1/whoami", "audra")["auditor"] is True
    assert get(api, "/v1/whoami", "alice")["auditor"] is False


def test_an_empty_range_is_an_empty_report(api: Api) -> None:
    body = get(
        api, "/v1/usage", "admin", **{"from": "2026-11-02", "to": "2026-11-02", "period": "day"}
    )
    assert body["rows"] == [] and body["start"] == body["end"]


def test_idle_rows_say_so_when_grouped_by_gpu_type(ledger: Api) -> None:
    body = get(ledger, "/v1/usage", "admin", **NOVEMBER, group_by="gpu_type")
    rows = {(r["gpu_type"], r["team"]): r for r in body["rows"]}  # type: ignore[attr-defined]
    assert rows["h100", None]["allocated_gpu_hours"] == 3.0  # team-a 2, team-b 1
    assert rows["h100", "(idle)"]["idle_gpu_hours"] == 3.0


def test_a_job_the_controller_runs_is_in_the_report(api: Api, open_dir: Path) -> None:
    """Through the real ledger: a running attempt counts up to now, then its whole run."""
    release = open_dir / "release"
    job = api.submit(
        "alice",
        team="team-a",
        resources={"gpus": 2, "gpu_types": ["h100"]},
        command=["sh", "-c", f"while [ ! -f {release} ]; do sleep 0.05; done"],
    )["id"]
    api.tick_until(lambda: api.status(str(job)) == "running", what="job running")
    time.sleep(0.3)
    # From two hours back: the hours a report reads begin in its range (periods.hour_range).
    today = {"from": (datetime.now(UTC) - timedelta(hours=2)).isoformat()}
    running = get(api, "/v1/usage", "vera", **today, report="attempts")["items"]
    assert [(a["job_id"], a["gpus"], a["outcome"]) for a in running] == [(job, 2, None)]  # type: ignore[index]
    assert running[0]["allocated_gpu_hours"] > 0  # type: ignore[index]
    release.touch()
    api.tick_until(lambda: api.status(str(job)) == "succeeded", what="job done")
    (done,) = get(api, "/v1/usage", "vera", **today, report="attempts")["items"]  # type: ignore[misc]
    (row,) = get(api, "/v1/usage", "vera", **today)["rows"]  # type: ignore[misc]
    assert done["outcome"] == "succeeded"
    assert row["allocated_gpu_hours"] + row["borrowed_gpu_hours"] == pytest.approx(
        done["allocated_gpu_hours"] + done["borrowed_gpu_hours"]
    )
