"""``gpupool history export``: the store's jobs as a trace that ``gpupool simulate`` reads back,
with no command, environment, name or user in it."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.config import sqlite_url
from gpupool.core.jobs import JobStatus
from gpupool.sim.trace import load_trace
from gpupool.state.db import make_engine, session_factory
from gpupool.state.models import AttemptRow
from gpupool.state.schema import ensure_schema
from support.rows import T0, queued_job

runner = CliRunner()
SECRET = "hunter2-AKIAIOSFODNN7EXAMPLE"
CONFIG = """
gpu_types: {h100: {}, t4: {}}
pools:
  - {name: h100-pool, backend: local, gpu_type: h100, nodes: 2, node: {gpus: 8}}
  - {name: t4-pool, backend: local, gpu_type: t4, nodes: 1, node: {gpus: 4}}
teams:
  team-a: {quota: {h100: {nominal: 8}, t4: {nominal: 4}}}
  team-b: {quota: {h100: {nominal: 8}}}
"""


@dataclass(frozen=True)
class Past:
    job_id: str
    submit_min: int  # minutes after T0
    status: JobStatus
    ran_s: float | None  # None: never started; -1: started, not ended
    gpu_types: tuple[str, ...] = ("h100",)
    ran_on: str = "h100"
    gpus: int = 2
    nodes: int = 1
    team: str = "team-a"


PAST = [
    Past("j-done", 0, JobStatus.SUCCEEDED, 600.0),
    Past("j-failed", 5, JobStatus.FAILED, 30.5, gpu_types=(), ran_on="t4", gpus=1),
    Past("j-either", 10, JobStatus.SUCCEEDED, 120.0, gpu_types=("h100", "t4"), ran_on="t4"),
    Past("j-gang", 12, JobStatus.SUCCEEDED, 900.0, gpus=4, nodes=2, team="team-b"),
    Past("j-queued", 20, JobStatus.QUEUED, None),
    Past("j-running", 25, JobStatus.RUNNING, -1),
    Past("j-cancelled", 30, JobStatus.CANCELLED, None),
    Past("j-later", 24 * 60, JobStatus.SUCCEEDED, 60.0),  # after --to
]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("GPUPOOL_HOME", str(home))
    url = sqlite_url(home)
    monkeypatch.setenv("GPUPOOL_DATABASE_URL", url)
    home.mkdir()
    engine = make_engine(url)
    ensure_schema(engine)
    with session_factory(engine).begin() as session:
        for past in PAST:
            submitted = T0 + timedelta(minutes=past.submit_min)
            started = submitted + timedelta(seconds=30)
            job = queued_job(
                past.job_id,
                name=f"train {SECRET}",
                team=past.team,
                status=past.status.value,
                command=["python", "train.py", f"--token={SECRET}"],
                env={"AWS_SECRET_ACCESS_KEY": SECRET},
                gpus=past.gpus,
                nodes=past.nodes,
                gpu_types=list(past.gpu_types),
                submitted_at=submitted,
                attempt=0 if past.ran_s is None else 1,
            )
            session.add(job)
            if past.ran_s is None:
                continue
            session.flush()
            finished = None if past.ran_s < 0 else started + timedelta(seconds=past.ran_s)
            session.add(
                AttemptRow(
                    job_id=past.job_id,
                    number=1,
                    status=past.status.value,
                    pool=f"{past.ran_on}-pool",
                    gpu_type=past.ran_on,
                    placements=[],
                    admitted_at=started,
                    started_at=started,
                    finished_at=finished,
                )
            )
    engine.dispose()
    return tmp_path


def test_export_round_trip_without_secrets(store: Path) -> None:
    out = store / "trace.csv"
    result = runner.invoke(
        app,
        ["history", "export", "--from", "2026-01-01", "--to", "2026-01-02", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "wrote 4 jobs" in result.output
    assert "(left out: 2 never started, 1 still running)" in result.output
    text = out.read_text()
    for leaked in (SECRET, "hunter2", "train.py", "AWS_SECRET", "alice", "python"):
        assert leaked not in text
    rows = {r["job_id"]: r for r in csv.DictReader(text.splitlines())}
    assert set(rows) == {"j-done", "j-failed", "j-either", "j-gang"}
    assert rows["j-done"] == {
        "job_id": "j-done",
        "submit_time": "2026-01-01T00:00:00+00:00",
        "duration_s": "600",
        "gpus": "2",
        "nodes": "1",
        "team": "team-a",
        "gpu_type": "h100",
        "priority_class": "default",
        "checkpoint_interval_s": "",
    }
    assert rows["j-failed"]["gpu_type"] == ""  # it accepted any type
    assert rows["j-either"]["gpu_type"] == "t4"  # several accepted: the one it ran on
    assert (rows["j-gang"]["gpus"], rows["j-gang"]["nodes"]) == ("8", "2")

    trace = load_trace(out)
    assert trace.problems == []
    assert [(j.job_id, j.submit_s, j.duration_s) for j in trace.jobs] == [
        ("j-done", 0.0, 600.0),
        ("j-failed", 300.0, 30.5),
        ("j-either", 600.0, 120.0),
        ("j-gang", 720.0, 900.0),
    ]

    (store / "proposed.yaml").write_text(CONFIG, encoding="utf-8")
    sim_out = store / "sim"
    replay_args = ["--trace", str(out), "--config", str(store / "proposed.yaml")]
    replay_args += ["--out", str(sim_out), "--policy", "gpupool", "--no-baselines"]
    replay = runner.invoke(app, ["simulate", *replay_args])
    assert replay.exit_code == 0, replay.output
    metrics = json.loads((sim_out / "metrics.json").read_text())["gpupool"]
    assert metrics["jobs"] == 4 and metrics["completed"] == 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--from", "2026-01-02", "--to", "2026-01-01"], "--to must be after", id="empty window"
        ),
        pytest.param(["--from", "yesterday", "--to", "2026-01-01"], "--from", id="not a time"),
    ],
)
def test_bad_window_is_a_usage_error(store: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["history", "export", *args, "--out", str(store / "t.csv")])
    assert result.exit_code == 2
    assert message in result.output
