"""CLI output is redacted: job details, JSON, errors and raw logs (followed or not)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import httpx
import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.client.testing import FakeApi, error_response, job_json

SAS = "sv=2022-11-02&sig=c2FzU2VjcmV0"
TOKEN = "gpt_0a1b2c3d4e5f_dG9rZW5TZWNyZXQtdG9rZW5TZWNyZXQ"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.and2dFNlY3JldA"
SECRETS = ("c2FzU2VjcmV0", "dG9rZW5TZWNyZXQ", "and2dFNlY3JldA", "Z3BTaWc")


@dataclass(frozen=True)
class Case:
    argv: list[str]
    routes: list[tuple[str, str, Callable[[], httpx.Response]]] = field(default_factory=list)
    visible: str = ""  # what must still be shown around the masked secret


def _split_chunks() -> Iterator[bytes]:
    yield b"download https://h/v1/artifacts/a?exp=1&gp_sig=Z3B"
    yield b"TaWc ok\nno newline at the end: gp_sig=Z3BTaWc"


def _logs(data: bytes) -> httpx.Response:
    headers = {"X-Next-Offset": str(len(data)), "X-Log-Complete": "true"}
    return httpx.Response(200, content=data, headers=headers)


JOB = job_json(
    id="j-1",
    command=["python", "fetch.py", f"https://acct.blob.core.windows.net/c/x?{SAS}"],
    env={"GPUPOOL_TOKEN": TOKEN, "ID_TOKEN": JWT},
)
LOG = f"download https://h/v1/artifacts/a?exp=1&gp_sig=Z3BTaWc ok\nauth {JWT}\n".encode()

CASES = [
    pytest.param(
        Case(
            ["job", "j-1"], [("GET", "/v1/jobs/j-1", lambda: httpx.Response(200, json=JOB))], "sv="
        ),
        id="job detail",
    ),
    pytest.param(
        Case(
            ["job", "j-1", "--json"],
            [("GET", "/v1/jobs/j-1", lambda: httpx.Response(200, json=JOB))],
            "gpt_0a1b2c3d4e5f_",
        ),
        id="job detail as JSON",
    ),
    pytest.param(
        Case(["logs", "j-1"], [("GET", "/v1/jobs/j-1/logs", lambda: _logs(LOG))], "gp_sig="),
        id="raw logs",
    ),
    pytest.param(
        Case(
            ["logs", "j-1", "--json"],
            [("GET", "/v1/jobs/j-1/logs", lambda: _logs(LOG))],
            "download",
        ),
        id="logs as JSON",
    ),
    pytest.param(
        Case(
            ["job", "j-1"],
            [
                (
                    "GET",
                    "/v1/jobs/j-1",
                    lambda: error_response(404, "not_found", f"no job; bearer {TOKEN}"),
                )
            ],
            "no job",
        ),
        id="error message",
    ),
    pytest.param(
        Case(
            ["logs", "-f", "j-1"],
            [("GET", "/v1/jobs/j-1/logs", lambda: httpx.Response(200, content=_split_chunks()))],
            "gp_sig=",
        ),
        id="followed logs with a signature split over chunks",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_cli_output_is_redacted(api: FakeApi, runner: CliRunner, case: Case) -> None:
    for method, path, answer in case.routes:
        api.add(method, path, lambda _, answer=answer: answer())

    result = runner.invoke(app, case.argv)

    shown = result.stdout + result.stderr
    assert case.visible in shown, shown
    for secret in SECRETS:
        assert secret not in shown
