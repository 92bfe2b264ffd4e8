"""API errors become ``error: <message>`` on stderr and the documented exit code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from gpupool.cli import context, exit_codes
from gpupool.cli.main import app
from gpupool.client.sdk import Client
from gpupool.client.testing import FakeApi


@dataclass(frozen=True)
class Case:
    status: int
    code: str
    want_exit: int


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(Case(404, "not_found", 3), id="not found -> 3"),
        pytest.param(Case(401, "unauthenticated", 4), id="unauthenticated -> 4"),
        pytest.param(Case(403, "forbidden", 4), id="forbidden -> 4"),
        pytest.param(Case(422, "invalid_request", 5), id="invalid request -> 5"),
        pytest.param(Case(422, "config_invalid", 5), id="config invalid -> 5"),
        pytest.param(Case(409, "conflict", 5), id="conflict -> 5"),
        pytest.param(Case(500, "internal", 1), id="server error -> 1"),
        pytest.param(Case(503, "unavailable", 7), id="unavailable for now -> 7"),
    ],
)
def test_error_codes_become_exit_codes(case: Case, api: FakeApi, runner: CliRunner) -> None:
    api.fail("POST", "/v1/jobs/j-1/cancel", case.status, case.code, "cannot cancel j-1")

    result = runner.invoke(app, ["cancel", "j-1"])

    assert result.exit_code == case.want_exit
    assert result.stderr.startswith("error: cannot cancel j-1")
    assert result.stdout == ""


@pytest.mark.parametrize(
    "details",
    [
        pytest.param(
            [
                {"field": "resources.gpus", "message": "must be >= 0"},
                {"field": "kind", "message": "unknown kind 'trainin'"},
            ],
            id="field/message list",
        ),
        pytest.param(
            [
                {"loc": ["body", "resources", "gpus"], "msg": "must be >= 0"},
                {"loc": ["body", "kind"], "msg": "unknown kind 'trainin'"},
            ],
            id="pydantic loc/msg list",
        ),
        pytest.param(
            {"resources.gpus": "must be >= 0", "kind": "unknown kind 'trainin'"},
            id="field -> message mapping",
        ),
    ],
)
def test_invalid_request_lists_each_field(details: Any, api: FakeApi, runner: CliRunner) -> None:
    api.fail("POST", "/v1/jobs", 422, "invalid_request", "invalid job", details)

    result = runner.invoke(app, ["submit", "--kind", "trainin", "--", "true"])

    assert result.exit_code == exit_codes.REJECTED
    lines = result.stderr.splitlines()
    assert lines[0] == "error: invalid job"
    assert "resources.gpus: must be >= 0" in lines[1]
    assert "kind: unknown kind 'trainin'" in lines[2]


def test_unreachable_server_exits_6_and_says_how_to_fix(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    def make_client(url: str | None, token: str | None) -> Client:
        return Client(url, token, transport=httpx.MockTransport(refuse))

    monkeypatch.setattr(context, "make_client", make_client)

    result = runner.invoke(app, ["--url", "http://10.0.0.9:8080", "jobs"])

    assert result.exit_code == exit_codes.UNREACHABLE
    assert "http://10.0.0.9:8080" in result.stderr
    assert "gpupool server" in result.stderr and "GPUPOOL_URL" in result.stderr


def test_token_is_never_printed_on_errors(api: FakeApi, runner: CliRunner) -> None:
    api.fail("GET", "/v1/whoami", 401, "unauthenticated", "token not recognised")

    result = runner.invoke(app, ["--token", "sekret-123", "whoami"])

    assert result.exit_code == exit_codes.NOT_ALLOWED
    assert "sekret-123" not in result.output


def test_help_documents_exit_codes(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--help"])

    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for fragment in (
        "3 not found",
        "4 unauthenticated or forbidden",
        "6 server unreachable",
        "7 server unavailable for now",
    ):
        assert fragment in text


def test_no_arguments_shows_help(runner: CliRunner) -> None:
    result = runner.invoke(app, [])

    assert "submit" in result.output
