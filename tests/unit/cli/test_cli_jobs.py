"""``gpupool jobs``, ``job``, ``cancel``, ``why`` and ``logs`` over a FakeApi."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.client.testing import FakeApi, attempt_json, job_json, why_json


def test_jobs_table(api: FakeApi, runner: CliRunner) -> None:
    api.add(
        "GET",
        "/v1/jobs",
        json={
            "items": [
                job_json(id="j-1", status="running", pool="local-h100", gpu_type="h100"),
                job_json(id="j-2", resources={"gpus": 2, "gpu_types": ["h100", "t4"]}),
            ],
            "next_cursor": None,
        },
    )

    result = runner.invoke(app, ["jobs", "--team", "team-a"])

    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[1]
    for column in ("id", "name", "team", "user", "status", "gpus", "pool", "age"):
        assert column in header
    assert "j-1" in result.stdout and "1xh100" in result.stdout and "local-h100" in result.stdout
    assert "2xh100|t4" in result.stdout
    assert dict(api.last.url.params) == {"team": "team-a", "limit": "50", "group": "true"}


def test_jobs_json_is_the_page(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/jobs", json={"items": [job_json(id="j-1")], "next_cursor": "c2"})

    result = runner.invoke(app, ["jobs", "--json", "--status", "queued", "--limit", "1"])

    assert result.exit_code == 0, result.output
    page = json.loads(result.stdout)
    assert [job["id"] for job in page["items"]] == ["j-1"]
    assert page["next_cursor"] == "c2"
    assert dict(api.last.url.params) == {"status": "queued", "limit": "1", "group": "true"}


def test_jobs_all_follows_cursors(api: FakeApi, runner: CliRunner) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("cursor") == "c2":
            return httpx.Response(200, json={"items": [job_json(id="j-2")], "next_cursor": None})
        return httpx.Response(200, json={"items": [job_json(id="j-1")], "next_cursor": "c2"})

    api.add("GET", "/v1/jobs", handler)

    result = runner.invoke(app, ["jobs", "--all", "--json"])

    assert result.exit_code == 0, result.output
    page = json.loads(result.stdout)
    assert [job["id"] for job in page["items"]] == ["j-1", "j-2"]
    assert page["next_cursor"] is None


def test_job_detail_shows_attempts(api: FakeApi, runner: CliRunner) -> None:
    attempts = [
        attempt_json(number=1, status="preempted", message="preempted by j-9"),
        attempt_json(number=2, devices=[[0, 1]]),
    ]
    api.add("GET", "/v1/jobs/j-1", json=job_json(id="j-1", status="running", attempts=attempts))

    result = runner.invoke(app, ["job", "j-1"])

    assert result.exit_code == 0, result.output
    assert "python train.py" in result.stdout
    assert "preempted by j-9" in result.stdout
    assert "0,1" in result.stdout


def test_job_detail_shows_the_image_of_a_job_that_has_one(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/jobs/j-1", json=job_json(id="j-1", image="ghcr.io/acme/train:1.4"))
    api.add("GET", "/v1/jobs/j-2", json=job_json(id="j-2"))

    with_image = runner.invoke(app, ["job", "j-1"])
    without = runner.invoke(app, ["job", "j-2"])

    assert "ghcr.io/acme/train:1.4" in with_image.stdout
    assert "image" not in without.stdout


def test_cancel(api: FakeApi, runner: CliRunner) -> None:
    api.add("POST", "/v1/jobs/j-1/cancel", json=job_json(id="j-1", status="cancelled"))

    result = runner.invoke(app, ["cancel", "j-1"])

    assert result.exit_code == 0, result.output
    assert result.stdout == "j-1 cancelled\n"


def test_why_table_and_summary(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/jobs/j-1/why", json=why_json(job_id="j-1"))

    result = runner.invoke(app, ["why", "j-1"])

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "no gpu type can admit the job now" in out
    assert "quota_exhausted" in out and "team-a uses 4/4 h100" in out
    assert "no_capacity" in out and "0 of 8 t4 free" in out


def test_why_json(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/jobs/j-1/why", json=why_json(job_id="j-1"))

    result = runner.invoke(app, ["why", "j-1", "--json"])

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["reasons"][1]["gpu_type"] == "t4"


def test_server_text_is_not_rich_markup(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/jobs/j-1/why", json=why_json(summary="waiting for [bold]h100[/bold]"))

    result = runner.invoke(app, ["why", "j-1"])

    assert "waiting for [bold]h100[/bold]" in result.stdout


def test_logs_writes_raw_bytes(api: FakeApi, runner: CliRunner) -> None:
    raw = b"loss=0.1\n\xff\xfe binary\n"
    api.add("GET", "/v1/jobs/j-1/logs", content=raw, headers={"X-Next-Offset": "20"})

    result = runner.invoke(app, ["logs", "j-1"])

    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == raw


def test_logs_follow_streams_until_the_end(api: FakeApi, runner: CliRunner) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"epoch 1\n"
        yield b"epoch 2\n"

    api.add("GET", "/v1/jobs/j-1/logs", lambda request: httpx.Response(200, content=chunks()))

    result = runner.invoke(app, ["logs", "-f", "j-1"])

    assert result.exit_code == 0, result.output
    assert result.stdout_bytes == b"epoch 1\nepoch 2\n"
    assert api.last.url.params["follow"] == "true"


def test_logs_json(api: FakeApi, runner: CliRunner) -> None:
    api.add(
        "GET",
        "/v1/jobs/j-1/logs",
        content=b"hi\n",
        headers={"X-Next-Offset": "3", "X-Log-Complete": "true"},
    )

    result = runner.invoke(app, ["logs", "j-1", "--json"])

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "job_id": "j-1",
        "data": "hi\n",
        "next_offset": 3,
        "complete": True,
    }


def test_jobs_quiet_prints_ids_and_array_ids(api: FakeApi, runner: CliRunner) -> None:
    items = [job_json(id="j-1"), job_json(id="a-7_0", array_id="a-7", array_index=0)]
    api.add("GET", "/v1/jobs", json={"items": items, "next_cursor": None})

    result = runner.invoke(app, ["jobs", "--quiet"])

    assert result.exit_code == 0, result.output
    assert result.stdout == "j-1\na-7\n"


def test_jobs_watch_redraws_until_interrupted(
    api: FakeApi, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = iter(["j-1", "j-2", "j-3"])
    api.add(
        "GET",
        "/v1/jobs",
        lambda request: httpx.Response(
            200, json={"items": [job_json(id=next(served))], "next_cursor": None}
        ),
    )
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr("gpupool.cli.jobs.time.sleep", nap)

    result = runner.invoke(app, ["jobs", "--watch", "--interval", "0.5"])

    assert result.exit_code == 0, result.output
    assert naps == [0.5, 0.5]
    assert next(served) == "j-3"  # fetched twice, once per redraw
    assert "j-2" in result.stdout and "Ctrl-C to stop" in result.stdout  # the last drawing


def test_jobs_watch_refuses_json(api: FakeApi, runner: CliRunner) -> None:
    result = runner.invoke(app, ["jobs", "--watch", "--json"])
    assert result.exit_code == 2 and "--watch draws a table" in result.output


def test_why_shows_position_blockers_and_estimate(api: FakeApi, runner: CliRunner) -> None:
    report = why_json(
        job_id="j-1",
        queue_position=3,
        queue_length=7,
        waits_for=[
            {
                "kind": "queue",
                "message": "2 job(s) of team-a ahead of it",
                "count": 2,
                "jobs": ["j-a", "j-b"],
            },
            {
                "kind": "running",
                "message": "1 running job(s) holding 4 GPUs on p end first "
                "(1 of teams you cannot see)",
                "count": 1,
                "gpus": 4,
                "jobs": [],
            },
        ],
        estimate={
            "start_at": "2024-05-01T13:00:00Z",
            "earliest": "2024-05-01T12:30:00Z",
            "latest": "2024-05-01T14:00:00Z",
            "pool": "p",
            "method": "past jobs",
            "basis": "no runtime limits: estimated from up to 12 similar past jobs",
        },
    )
    api.add("GET", "/v1/jobs/j-1/why", json=report)

    result = runner.invoke(app, ["why", "j-1"])

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "queue position: 3 of 7" in out
    assert "waits for (queue): 2 job(s) of team-a ahead of it: j-a, j-b" in out
    assert "(1 of teams you cannot see)" in out
    assert (
        "estimated start: 2024-05-01T13:00:00+00:00 on p (between 2024-05-01T12:30:00+00:00" in out
    )
    assert "method: past jobs: no runtime limits" in out


def test_why_of_an_older_server_without_the_new_fields(api: FakeApi, runner: CliRunner) -> None:
    api.add("GET", "/v1/jobs/j-1/why", json=why_json(job_id="j-1"))

    result = runner.invoke(app, ["why", "j-1"])

    assert result.exit_code == 0, result.output
    assert "queue position" not in result.stdout and "estimated start" not in result.stdout
