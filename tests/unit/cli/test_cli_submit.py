"""``gpupool submit``: flags become the submit body; the job id and status are printed."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.client.testing import FakeApi, job_json


def test_submit_maps_every_flag(api: FakeApi, runner: CliRunner) -> None:
    api.add("POST", "/v1/jobs", json=job_json(id="j-42", status="queued"), status=201)

    result = runner.invoke(
        app,
        [
            "--token", "cli-tok",
            "submit",
            "--team", "team-a",
            "--gpus", "2",
            "--gpu-type", "h100",
            "--gpu-type", "a100",
            "--nodes", "2",
            "--priority", "training",
            "--name", "train-1",
            "--kind", "training",
            "--env", "SEED=1",
            "--env", "URL=http://a?b=c",
            "--max-runtime", "3600",
            "--checkpoint-interval", "900",
            "--input", "shared/datasets/x",
            "--input", "home/alice/cfg.yaml",
            "--output", "home/alice/ckpt",
            "--idempotency-key", "retry-1",
            "--",
            "python", "train.py", "--lr", "3e-4",
        ],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert result.stdout == "j-42 queued\n"
    assert api.last.headers["Authorization"] == "Bearer cli-tok"
    assert api.last.headers["Idempotency-Key"] == "retry-1"
    assert api.last_json() == {
        "name": "train-1",
        "team": "team-a",
        "command": ["python", "train.py", "--lr", "3e-4"],
        "resources": {"gpus": 2, "gpu_types": ["h100", "a100"], "nodes": 2},
        "priority_class": "training",
        "kind": "training",
        "env": {"SEED": "1", "URL": "http://a?b=c"},
        "max_runtime_s": 3600,
        "checkpoint_interval_s": 900,
        "inputs": ["shared/datasets/x", "home/alice/cfg.yaml"],
        "outputs": ["home/alice/ckpt"],
    }


def test_command_options_after_the_first_argument_belong_to_the_job(
    api: FakeApi, runner: CliRunner
) -> None:
    api.add("POST", "/v1/jobs", json=job_json(), status=201)

    result = runner.invoke(app, ["submit", "--gpus", "0", "python", "-c", "print(1)", "--json"])

    assert result.exit_code == 0, result.output
    assert api.last_json()["command"] == ["python", "-c", "print(1)", "--json"]
    assert api.last_json()["resources"]["gpus"] == 0


def test_submit_json_prints_the_job(api: FakeApi, runner: CliRunner) -> None:
    api.add("POST", "/v1/jobs", json=job_json(id="j-9"), status=201)

    result = runner.invoke(app, ["submit", "--json", "--", "true"])

    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["id"] == "j-9"
    assert printed["submitted_at"] == "2024-05-01T12:00:00Z"


def test_token_from_environment(api: FakeApi, runner: CliRunner, monkeypatch: object) -> None:
    api.add("POST", "/v1/jobs", json=job_json(), status=201)

    result = runner.invoke(app, ["submit", "--", "true"], env={"GPUPOOL_TOKEN": "env-tok"})

    assert result.exit_code == 0, result.output
    assert api.last.headers["Authorization"] == "Bearer env-tok"


def test_bad_env_flag_is_a_usage_error(api: FakeApi, runner: CliRunner) -> None:
    result = runner.invoke(app, ["submit", "--env", "NOEQUALS", "--", "true"])

    assert result.exit_code == 2
    assert "KEY=VALUE" in result.stderr
    assert api.requests == []


def test_missing_command_is_a_usage_error(api: FakeApi, runner: CliRunner) -> None:
    result = runner.invoke(app, ["submit", "--gpus", "1"])

    assert result.exit_code == 2
    assert api.requests == []
