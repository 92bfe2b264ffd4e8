"""Job arrays in the CLI: ``submit --array``, grouped ``jobs`` and ``--expand``, ``cancel``."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.client.testing import FakeApi, array_json, job_json

ARRAY = "a-0123456789ab"


def test_submit_array_sends_one_request_and_prints_the_array_compactly(
    api: FakeApi, runner: CliRunner
) -> None:
    api.add("POST", "/v1/arrays", json=array_json(id=ARRAY), status=201)

    result = runner.invoke(
        app,
        ["submit", "--array", "0-999", "--gpus", "0", "--idempotency-key", "k", "--",
         "python", "sweep.py"],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"{ARRAY} 1000 tasks queued ({ARRAY}_0 .. {ARRAY}_999)"
    assert len(api.requests) == 1
    assert api.last_json() == {
        "command": ["python", "sweep.py"],
        "resources": {"gpus": 0, "nodes": 1},
        "array": "0-999",
    }
    assert api.last.headers["Idempotency-Key"] == "k"


def test_submit_array_refused_prints_the_array_field(api: FakeApi, runner: CliRunner) -> None:
    details = [{"field": "array", "message": "more than 10000 tasks, the server's limit"}]
    api.fail("POST", "/v1/arrays", 422, "invalid_request", "invalid array", details)

    result = runner.invoke(app, ["submit", "--array", "0-20000", "--", "true"])

    assert result.exit_code != 0
    assert "array" in result.stderr and "10000" in result.stderr


def page_with_an_array() -> dict[str, object]:
    return {
        "items": [
            job_json(id=f"{ARRAY}_0", name="sweep", array_id=ARRAY, array_index=0),
            job_json(id="j-1", name="single", status="running", pool="local-h100"),
        ],
        "next_cursor": None,
        "arrays": {ARRAY: {"queued": 997, "running": 2, "succeeded": 1}},
    }


def test_jobs_shows_an_array_as_one_line_with_counts(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/jobs", json=page_with_an_array())

    result = runner.invoke(app, ["jobs"])

    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if ARRAY in line or "j-1" in line]
    assert len(lines) == 2
    assert f"{ARRAY} (1000 tasks)" in lines[0]
    assert "997 queued, 2 running, 1 succeeded" in lines[0]
    assert f"{ARRAY}_0" not in result.stdout
    assert "running" in lines[1] and "local-h100" in lines[1]
    assert api.last.url.params["group"] == "true"


@dataclass
class Expand:
    args: list[str]
    params: dict[str, str]


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(Expand(["--expand"], {"limit": "50"}), id="expand lists every task"),
        pytest.param(
            Expand(["--array", ARRAY], {"limit": "50", "array": ARRAY}), id="one array's tasks"
        ),
    ],
)
def test_jobs_expanded_lists_tasks_by_their_ids(
    api: FakeApi, runner: CliRunner, case: Expand
) -> None:
    tasks = [job_json(id=f"{ARRAY}_{i}", array_id=ARRAY, array_index=i) for i in (0, 1)]
    api.add("GET", "/v1/jobs", json={"items": tasks, "next_cursor": None})

    result = runner.invoke(app, ["jobs", *case.args])

    assert result.exit_code == 0, result.output
    assert f"{ARRAY}_0" in result.stdout and f"{ARRAY}_1" in result.stdout
    assert dict(api.last.url.params) == case.params


@dataclass
class Cancel:
    target: str
    path: str
    answer: dict[str, object]
    printed: str


CANCELS = [
    pytest.param(
        Cancel(
            ARRAY,
            f"/v1/arrays/{ARRAY}/cancel",
            array_json(id=ARRAY, count=3, counts={"cancelled": 2, "succeeded": 1}),
            f"{ARRAY} 3 tasks: 2 cancelled, 1 succeeded",
        ),
        id="an array id cancels the whole array",
    ),
    pytest.param(
        Cancel(
            f"{ARRAY}_5",
            f"/v1/jobs/{ARRAY}_5/cancel",
            job_json(id=f"{ARRAY}_5", status="cancelled"),
            f"{ARRAY}_5 cancelled",
        ),
        id="array id and index cancels one task",
    ),
    pytest.param(
        Cancel(
            "j-1", "/v1/jobs/j-1/cancel", job_json(id="j-1", status="cancelled"), "j-1 cancelled"
        ),
        id="a job id cancels that job",
    ),
]


@pytest.mark.parametrize("case", CANCELS)
def test_cancel_addresses_an_array_or_one_task(
    api: FakeApi, runner: CliRunner, case: Cancel
) -> None:
    api.add("POST", case.path, json=case.answer)

    result = runner.invoke(app, ["cancel", case.target])

    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == case.printed
    assert [r.url.path for r in api.requests] == [case.path]


def test_cancel_array_json_is_the_array(api: FakeApi, runner: CliRunner) -> None:
    api.add("POST", f"/v1/arrays/{ARRAY}/cancel", json=array_json(id=ARRAY))

    result = runner.invoke(app, ["cancel", ARRAY, "--json"])

    assert json.loads(result.stdout)["id"] == ARRAY
