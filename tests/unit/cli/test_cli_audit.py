"""``gpupool audit``: filters reach the server, pages are followed, errors map to exit codes."""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx
import pytest
from typer.testing import CliRunner

from gpupool.cli.exit_codes import NOT_ALLOWED
from gpupool.cli.main import app
from gpupool.client.testing import FakeApi


def entry(id: int, **fields: object) -> dict[str, object]:
    return {
        "id": id,
        "at": "2026-01-02T03:04:05+00:00",
        "actor": "alice",
        "token_id": "abc123",
        "action": "job.submit",
        "target": f"j-{id}",
        "team": "team-a",
        "outcome": "ok",
        "status": 201,
        **fields,
    }


def paged(request: httpx.Request) -> httpx.Response:
    """Two pages of two entries: ids 4, 3 then 2, 1."""
    if request.url.params.get("cursor") == "next":
        return httpx.Response(200, json={"items": [entry(2), entry(1)], "next_cursor": None})
    return httpx.Response(200, json={"items": [entry(4), entry(3)], "next_cursor": "next"})


@dataclass
class Case:
    args: list[str]
    want_params: dict[str, str]
    want_targets: list[str]


CASES = [
    pytest.param(Case([], {"limit": "50"}, ["j-4", "j-3", "j-2", "j-1"]), id="follows every page"),
    pytest.param(
        Case(["--limit", "3"], {"limit": "3"}, ["j-4", "j-3", "j-2"]), id="stops at limit"
    ),
    pytest.param(
        Case(
            ["--team", "team-a", "--outcome", "forbidden", "--since", "2026-01-01"],
            {"team": "team-a", "outcome": "forbidden", "since": "2026-01-01T00:00:00"},
            ["j-4", "j-3", "j-2", "j-1"],
        ),
        id="filters are sent",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_audit_lists_entries(api: FakeApi, runner: CliRunner, case: Case) -> None:
    api.add("GET", "/v1/audit", paged)

    result = runner.invoke(app, ["audit", "--json", *case.args])

    assert result.exit_code == 0, result.output
    assert [e["target"] for e in json.loads(result.stdout)["items"]] == case.want_targets
    first = dict(api.requests[0].url.params)
    assert {k: first[k] for k in case.want_params} == case.want_params


def test_audit_table(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/audit", json={"items": [entry(7, outcome="forbidden")]})

    result = runner.invoke(app, ["audit"])

    assert result.exit_code == 0, result.output
    assert "job.submit" in result.stdout
    assert "forbidden" in result.stdout


def test_audit_forbidden_exits_not_allowed(api: FakeApi, runner: CliRunner) -> None:
    api.fail("GET", "/v1/audit", 403, "forbidden", "for platform admins and team admins")

    result = runner.invoke(app, ["audit"])

    assert result.exit_code == NOT_ALLOWED
    assert "team admins" in result.stderr
