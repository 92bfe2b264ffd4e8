"""``gpupool budget set|show|deliveries`` and the budget columns of ``gpupool teams``."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.client.testing import FakeApi, budget_json, team_json


def test_set_sends_the_budget_and_names_the_new_version(api: FakeApi, runner: CliRunner) -> None:
    api.add("PUT", "/v1/budgets/team-a/gpu", json={"version": 7, "applied": True, "summary": "x"})

    result = runner.invoke(
        app,
        ["budget", "set", "team-a", "--name", "gpu", "--gpu-hours", "1000", "--enforcement",
         "hold", "--thresholds", "75,100", "--gpu-type", "h100"],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert result.stdout == "budget team-a/gpu set: configuration version 7\n"
    (request,) = api.requests
    assert json.loads(request.content) == {
        "period": "month",
        "gpu_hours": 1000.0,
        "gpu_type": "h100",
        "enforcement": "hold",
        "thresholds": [75.0, 100.0],
    }


def test_set_a_custom_period_sends_its_days(api: FakeApi, runner: CliRunner) -> None:
    api.add("PUT", "/v1/budgets/team-a/q1", json={"version": 3, "applied": True})

    result = runner.invoke(
        app,
        ["budget", "set", "team-a", "--name", "q1", "--period", "custom", "--amount", "500",
         "--start", "2027-01-01", "--end", "2027-03-31"],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    body = json.loads(api.requests[0].content)
    assert (body["start"], body["end"], body["amount"]) == ("2027-01-01", "2027-03-31", 500.0)


def test_set_refused_for_a_team_admin_exits_4(api: FakeApi, runner: CliRunner) -> None:
    message = "user 'carol' may not set budgets: platform admins only"
    api.fail("PUT", "/v1/budgets/team-a/monthly", 403, "forbidden", message)

    result = runner.invoke(app, ["budget", "set", "team-a", "--gpu-hours", "5"])

    assert result.exit_code == 4
    assert "platform admins only" in result.stderr


def test_a_stale_base_version_exits_5(api: FakeApi, runner: CliRunner) -> None:
    message = "the configuration changed since version 3 (now version 4)"
    api.fail("PUT", "/v1/budgets/team-a/monthly", 409, "conflict", message)

    result = runner.invoke(
        app, ["budget", "set", "team-a", "--gpu-hours", "5", "--base-version", "3"]
    )

    assert result.exit_code == 5 and "changed since version 3" in result.stderr
    assert json.loads(api.requests[0].content)["base_version"] == 3


def test_bad_thresholds_are_a_usage_error(api: FakeApi, runner: CliRunner) -> None:
    result = runner.invoke(app, ["budget", "set", "team-a", "--thresholds", "50,lots"])

    assert result.exit_code == 2 and api.requests == []


def test_show_prints_used_limit_remaining_state_and_period_end(
    api: FakeApi, runner: CliRunner
) -> None:
    over = budget_json(
        name="h100", gpu_type="h100", used=1012.0, remaining=0.0, percent=101.2, status="over",
        enforced=True,
    )  # fmt: skip
    api.add("GET", "/v1/budgets", json={"items": [budget_json(), over]})

    result = runner.invoke(app, ["budget", "show", "team-a"])

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    monthly = next(line for line in lines if "monthly" in line)
    assert "812 GPU-h" in monthly and "1,000 GPU-h" in monthly and "188 GPU-h" in monthly
    assert "warning 81%" in monthly and "2027-07-01T00:00:00+00:00" in monthly
    assert "over 101% (hold)" in next(line for line in lines if "h100 (h100)" in line)
    assert api.requests[0].url.params["team"] == "team-a"


def test_show_json(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/budgets", json={"items": [budget_json()]})

    result = runner.invoke(app, ["budget", "show", "--json"])

    assert [b["name"] for b in json.loads(result.stdout)["items"]] == ["monthly"]


def test_deliveries(api: FakeApi, runner: CliRunner) -> None:
    entry = {
        "id": 3, "message_id": 1, "webhook": "ops", "event": "budget.threshold", "try_number": 2,
        "at": "2027-06-10T12:00:00+00:00", "outcome": "retry", "status_code": 503,
        "error": "HTTP 503", "duration_ms": 12.5,
    }  # fmt: skip
    api.add("GET", "/v1/webhooks/deliveries", json={"items": [entry]})

    result = runner.invoke(app, ["budget", "deliveries"])

    assert result.exit_code == 0, result.output
    assert "ops" in result.stdout and "retry" in result.stdout and "HTTP 503" in result.stdout


def test_teams_shows_usage_share_and_budget_left(api: FakeApi, runner: CliRunner) -> None:
    team = team_json(
        usage_gpu_hours=812.5, usage_share=0.4, budget_remaining=187.5, budget_unit="GPU-h",
        budget_status="warning",
    )  # fmt: skip
    api.add("GET", "/v1/teams", json={"items": [team, team_json(name="team-b")]})

    result = runner.invoke(app, ["teams"])

    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if "team-a" in line)
    assert "812.5" in row and "40.0%" in row and "188 GPU-h (warning)" in row
