"""``gpupool usage`` and ``gpupool costs``: options reach the server, tables, CSV, JSON,
missing spans as warnings, errors as exit codes."""

from __future__ import annotations

import json

import httpx
from typer.testing import CliRunner

from gpupool.cli.exit_codes import NOT_ALLOWED
from gpupool.cli.main import app
from gpupool.client.testing import FakeApi


def report(**overrides: object) -> dict[str, object]:
    return {
        "start": "2026-11-01T00:00:00Z",
        "end": "2026-12-01T00:00:00Z",
        "timezone": "UTC",
        "generated_at": "2026-12-04T00:00:00Z",
        "group_by": ["team", "gpu_type"],
        "idle_cost": "unshared",
        "missing": [],
        "rows": [
            {
                "period": "2026-11",
                "period_start": "2026-11-01T00:00:00Z",
                "period_end": "2026-12-01T00:00:00Z",
                "team": "team-a",
                "gpu_type": "h100",
                "allocated_gpu_hours": 12.5,
                "borrowed_gpu_hours": 2.0,
                "idle_gpu_hours": 0.0,
                "allocated_cost": 50.0,
                "borrowed_cost": 8.0,
                "idle_cost": 0.0,
                "total_cost": 58.0,
                "unpriced": False,
            },
            {
                "period": "2026-11",
                "period_start": "2026-11-01T00:00:00Z",
                "period_end": "2026-12-01T00:00:00Z",
                "team": "(idle)",
                "gpu_type": "h100",
                "pool": "gpu-pool-1",
                "allocated_gpu_hours": 0.0,
                "borrowed_gpu_hours": 0.0,
                "idle_gpu_hours": 100.0,
                "allocated_cost": 0.0,
                "borrowed_cost": 0.0,
                "idle_cost": 400.0,
                "total_cost": 400.0,
                "unpriced": False,
            },
        ],
        **overrides,
    }


def test_costs_table_sends_the_range_and_grouping(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/costs", json={**report(), "currency": "EUR"})

    result = runner.invoke(
        app,
        ["costs", "--period", "month", "--at", "2026-11-10", "--by", "team", "--by", "gpu-type"],
    )

    assert result.exit_code == 0, result.output
    assert dict(api.last.url.params) == {
        "period": "month",
        "at": "2026-11-10",
        "group_by": "team,gpu_type",
    }
    assert "58.00 EUR" in result.stdout and "gpu-pool-1" in result.stdout
    assert "12.50" in result.stdout


def test_usage_json_and_priority_class_grouping(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/usage", json=report())

    result = runner.invoke(
        app,
        ["usage", "--json", "--from", "2026-11-01", "--to", "2026-11-08", "--by", "priority-class"],
    )

    assert result.exit_code == 0, result.output
    params = dict(api.last.url.params)
    assert params == {"from": "2026-11-01", "to": "2026-11-08", "group_by": "priority_class"}
    assert json.loads(result.stdout)["rows"][0]["allocated_gpu_hours"] == 12.5


def test_missing_spans_are_warned_about(api: FakeApi, runner: CliRunner) -> None:
    gap = {"start": "2026-11-05T00:00:00Z", "end": "2026-11-05T03:00:00Z", "reason": "down"}
    api.add("GET", "/v1/usage", json=report(missing=[gap]))

    result = runner.invoke(app, ["usage"])

    assert result.exit_code == 0, result.output
    assert "no usage data" in result.stderr and "not zero" in result.stderr


def test_csv_is_the_servers(api: FakeApi, runner: CliRunner) -> None:
    text = "period,team,allocated_gpu_hours\n2026-11,team-a,12.5\n"

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.headers["accept"] == "text/csv"
        return httpx.Response(200, text=text, headers={"content-type": "text/csv"})

    api.add("GET", "/v1/costs", answer)

    result = runner.invoke(app, ["costs", "--csv", "--team", "team-a"])

    assert result.exit_code == 0, result.output
    assert result.stdout == text
    assert api.last.url.params["team"] == "team-a"


def test_attempts_follow_pages(api: FakeApi, runner: CliRunner) -> None:
    def line(attempt_id: int) -> dict[str, object]:
        return {"attempt_id": attempt_id, "job_id": f"j{attempt_id}", "team": "team-a", "gpus": 1}

    def paged(request: httpx.Request) -> httpx.Response:
        assert request.url.params["report"] == "attempts"
        if request.url.params.get("cursor") == "2":
            return httpx.Response(200, json={"items": [line(3)], "next_cursor": None})
        return httpx.Response(200, json={"items": [line(1), line(2)], "next_cursor": "2"})

    api.add("GET", "/v1/usage", paged)

    result = runner.invoke(app, ["usage", "--attempts", "--json"])

    assert result.exit_code == 0, result.output
    assert [a["attempt_id"] for a in json.loads(result.stdout)["items"]] == [1, 2, 3]


def test_forbidden_team_exits_not_allowed(api: FakeApi, runner: CliRunner) -> None:
    api.fail("GET", "/v1/usage", 403, "forbidden", "may not read the usage of team 'team-b'")

    result = runner.invoke(app, ["usage", "--team", "team-b"])

    assert result.exit_code == NOT_ALLOWED
    assert "team-b" in result.stderr
