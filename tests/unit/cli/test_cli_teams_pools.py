"""``gpupool teams``, ``pools`` and ``whoami``."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.client.testing import FakeApi, pool_json, team_json, whoami_json


def test_teams_shows_quota_used_over_nominal(api: FakeApi, runner: CliRunner) -> None:
    quota = {
        "h100": {"nominal": 4, "used": 5, "borrowed": 1},
        "t4": {"nominal": 8, "used": 0, "borrowed": 0},
    }
    api.add("GET", "/v1/teams", json={"items": [team_json(quota=quota)]})

    result = runner.invoke(app, ["teams"])

    assert result.exit_code == 0, result.output
    assert "h100 5/4 (+1 borrowed)" in result.stdout
    assert "t4 0/8" in result.stdout


def test_one_team_lists_members(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/teams/team-a", json=team_json(members={"bob": "member", "al": "admin"}))

    result = runner.invoke(app, ["teams", "team-a"])

    assert result.exit_code == 0, result.output
    assert "bob" in result.stdout and "admin" in result.stdout


def test_teams_json(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/teams", json={"items": [team_json(), team_json(name="team-b")]})

    result = runner.invoke(app, ["teams", "--json"])

    assert [t["name"] for t in json.loads(result.stdout)["items"]] == ["team-a", "team-b"]


def test_pools(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/pools", json={"items": [pool_json(dedicated_to="team-b")]})

    result = runner.invoke(app, ["pools"])

    assert result.exit_code == 0, result.output
    assert "local-h100" in result.stdout and "3/8" in result.stdout and "team-b" in result.stdout


def test_pools_say_which_is_unavailable_and_why(api: FakeApi, runner: CliRunner) -> None:
    down = pool_json(name="slurm-a100", available=False, message="sinfo: connection refused")
    api.add("GET", "/v1/pools", json={"items": [pool_json(), down]})

    table = runner.invoke(app, ["pools"], terminal_width=200)
    listed = runner.invoke(app, ["pools", "--json"])

    assert table.exit_code == 0, table.output
    assert "unavailable: sinfo: connection refused" in table.stdout
    assert [
        (p["name"], p["available"], p["message"]) for p in json.loads(listed.stdout)["items"]
    ] == [
        ("local-h100", True, ""),
        ("slurm-a100", False, "sinfo: connection refused"),
    ]


def test_pools_show_an_autoscaled_pool_s_nodes(api: FakeApi, runner: CliRunner) -> None:
    scale = {"target": 2, "ready": 1, "provisioning": 1, "draining": 0, "reason": "demand"}
    api.add("GET", "/v1/pools", json={"items": [pool_json(nodes=3, autoscale=scale)]})

    table = runner.invoke(app, ["pools"], terminal_width=200)

    assert table.exit_code == 0, table.output
    assert "1 of 3x4, target 2 (1 coming up)" in table.stdout


def test_whoami(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/whoami", json=whoami_json(platform_admin=True))

    result = runner.invoke(app, ["whoami"])

    assert result.exit_code == 0, result.output
    assert result.stdout == "user: alice (platform admin)\nteams: team-a (admin), team-b (member)\n"


def test_whoami_json(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/whoami", json=whoami_json())

    result = runner.invoke(app, ["whoami", "--json"])

    assert json.loads(result.stdout)["user"] == "alice"
