"""``gpupool submit``: flags become the submit body; the job id and status are printed."""

from __future__ import annotations

import json
from pathlib import Path

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
            "--image", "ghcr.io/acme/train:1.4",
            "--image-pull-secret", "acme",
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
        "image": "ghcr.io/acme/train:1.4",
        "image_pull_secret": "acme",
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


def test_submit_quiet_prints_only_the_id(api: FakeApi, runner: CliRunner) -> None:
    api.add("POST", "/v1/jobs", json=job_json(id="j-42", status="queued"), status=201)

    result = runner.invoke(app, ["submit", "-q", "--team", "team-a", "--", "true"])

    assert result.exit_code == 0, result.output
    assert result.stdout == "j-42\n"


def test_submit_file_sends_the_spec_as_the_body_with_flags_overriding(
    api: FakeApi, runner: CliRunner, tmp_path: Path
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: train-1\n"
        "team: team-a\n"
        "command: [python, train.py]\n"
        "resources: {gpus: 2, gpu_types: [h100, t4]}\n"
        "env: {SEED: '1'}\n"
        "max_runtime_s: 3600\n"
    )
    api.add("POST", "/v1/jobs", json=job_json(id="j-7", status="queued"), status=201)

    result = runner.invoke(
        app,
        ["submit", "-f", str(spec), "--gpus", "4", "--env", "LR=3e-4", "--name", "t2",
         "--checkpoint-interval", "600"],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert json.loads(api.last.content) == {
        "name": "t2",
        "team": "team-a",
        "command": ["python", "train.py"],
        "resources": {"gpus": 4, "gpu_types": ["h100", "t4"]},
        "env": {"SEED": "1", "LR": "3e-4"},
        "max_runtime_s": 3600,
        "checkpoint_interval_s": 600,
    }


def test_submit_file_with_an_array_goes_to_the_arrays_route(
    api: FakeApi, runner: CliRunner, tmp_path: Path
) -> None:
    spec = tmp_path / "sweep.json"
    spec.write_text(json.dumps({"command": ["true"], "array": "0-9"}))
    api.add(
        "POST",
        "/v1/arrays",
        json={
            "id": "a-1",
            "name": "batch-1",
            "team": "team-a",
            "user": "alice",
            "count": 10,
            "first_index": 0,
            "last_index": 9,
            "submitted_at": "2026-12-01T12:00:00Z",
            "counts": {"queued": 10},
        },
        status=201,
    )

    result = runner.invoke(app, ["submit", "-q", "-f", str(spec)])

    assert result.exit_code == 0, result.output
    assert result.stdout == "a-1\n"
    assert json.loads(api.last.content)["array"] == "0-9"


def test_submit_file_that_is_not_a_mapping_is_a_usage_error(
    api: FakeApi, runner: CliRunner, tmp_path: Path
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("- python\n- train.py\n")
    result = runner.invoke(app, ["submit", "-f", str(spec)])
    assert result.exit_code == 2 and "must hold a mapping of submit fields" in result.output


def test_submit_without_command_or_file_is_a_usage_error(api: FakeApi, runner: CliRunner) -> None:
    result = runner.invoke(app, ["submit", "--gpus", "1"])
    assert result.exit_code == 2 and "give the command after `--`" in result.output
