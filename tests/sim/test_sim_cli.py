"""``gpupool simulate`` end to end on small inputs: outputs, errors, bad rows, --strict."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.sim.cluster import POLICIES

ROOT = Path(__file__).resolve().parents[2]
PHILLY = ROOT / "examples" / "traces" / "philly"
METRIC_KEYS = {
    "jobs",
    "completed",
    "unschedulable",
    "avg_jct_s",
    "p50_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "p50_queue_s",
    "p90_queue_s",
    "p99_queue_s",
    "utilization",
    "makespan_s",
    "preemptions",
    "preemptions_per_job",
    "lost_gpu_hours",
    "borrowed_gpu_hours",
    "quota_violation_s",
    "jain_fairness",
    "wall_s",
    "per_team",
}
CONFIG = """
gpu_types: {h100: {}, t4: {}}
pools:
  - {name: h100-pool, backend: slurm, gpu_type: h100, nodes: 2, node: {gpus: 4},
     options: {partition: h100}}
  - {name: t4-pool, backend: local, gpu_type: t4, nodes: 1, node: {gpus: 4}}
cohorts: {research: {}}
teams:
  team-a: {cohort: research, quota: {h100: {nominal: 4}, t4: {nominal: 2}}}
  team-b: {cohort: research, quota: {h100: {nominal: 4}, t4: {nominal: 2}}}
"""
TRACE = """submit_time,duration_s,gpus,team,gpu_type,job_id
0,600,4,team-a,h100,a1
0,600,4,team-a,h100,a2
60,300,2,team-b,,b1
120,300,1,team-b,t4,b2
oops,300,1,team-b,t4,b3
"""


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "cluster.yaml").write_text(CONFIG, encoding="utf-8")
    (tmp_path / "trace.csv").write_text(TRACE, encoding="utf-8")
    return tmp_path / "cluster.yaml", tmp_path / "trace.csv"


def test_writes_metrics_jobs_and_report(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    config, trace = inputs
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        ["simulate", "--trace", str(trace), "--config", str(config), "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "line 6: submit_time 'oops'" in result.output  # the bad row, reported and skipped
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics) == list(POLICIES)
    for name in POLICIES:
        assert set(metrics[name]) >= METRIC_KEYS
        assert metrics[name]["jobs"] == 4
        assert metrics[name]["completed"] == 4
    # gpupool lets a2 borrow team-b's idle h100s; hard quotas make it wait for a1.
    assert metrics["gpupool"]["borrowed_gpu_hours"] > 0
    assert metrics["hard-quota-fifo"]["avg_jct_s"] > metrics["gpupool"]["avg_jct_s"]
    with (out / "jobs.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 4 * len(POLICIES)
    a2 = {r["policy"]: r for r in rows if r["job_id"] == "a2"}
    assert a2["gpupool"]["start_s"] == "0" and a2["hard-quota-fifo"]["start_s"] == "600"
    report = (out / "report.html").read_text()
    assert report.count("<svg") == 3 and "Queueing delay CDF" in report
    # Every team waits less sharing than behind its own quota here: nobody is flagged.
    sharing = metrics["gpupool"]["sharing_incentive"]
    assert sharing["measured"] and sharing["teams_above_1"] == []
    assert sharing["teams"]["team-a"]["avg_ratio"] < 1
    assert set(metrics["gpupool"]["targets"]) == {
        "teams_sharing_incentive",
        "p99_queue_vs_fifo",
        "jain_vs_hard_quota_fifo",
        "jain_vs_fifo",
        "utilization_vs_fifo",
    }
    assert all(t["met"] in (True, False) for t in metrics["gpupool"]["targets"].values())
    assert (
        "targets" not in metrics["fifo"] and "sharing_incentive" not in metrics["hard-quota-fifo"]
    )
    assert "Sharing incentive" in report and "Targets" in result.output


@pytest.mark.parametrize(
    ("flag", "want_policies"),
    [
        pytest.param([], {"gpupool", *POLICIES}, id="the baselines are added"),
        pytest.param(["--no-baselines"], {"gpupool"}, id="--no-baselines runs gpupool alone"),
    ],
)
def test_philly_sample_runs(tmp_path: Path, flag: list[str], want_policies: set[str]) -> None:
    sample = tmp_path / "philly.csv"
    with (PHILLY / "philly.csv").open() as handle:
        sample.write_text("".join(line for _, line in zip(range(301), handle, strict=False)))
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app,
        [
            "simulate",
            "--trace",
            str(sample),
            "--trace-format",
            "philly",
            "--philly-vcs",
            str(PHILLY / "philly_vc.csv"),
            "--capacity-scale",
            "0.2",
            "--policy",
            "gpupool",
            "--out",
            str(out),
            *flag,
        ],
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics) == want_policies
    assert metrics["gpupool"]["jobs"] == 300
    assert metrics["gpupool"]["completed"] + metrics["gpupool"]["unschedulable"] == 300
    measured = metrics["gpupool"]["sharing_incentive"]["measured"]
    assert measured == ("hard-quota-fifo" in want_policies)
    if not measured:  # nothing to compare with: said, not guessed
        assert all(t["met"] is None for t in metrics["gpupool"]["targets"].values())
        assert "did not run" in metrics["gpupool"]["targets"]["jain_vs_fifo"]["note"]


@pytest.mark.parametrize(
    ("extra", "want_code", "want"),
    [
        pytest.param(["--strict"], 2, "1 bad rows (--strict)", id="strict stops at a bad row"),
        pytest.param(["--policy", "sjf"], 2, "unknown --policy sjf", id="unknown policy"),
        pytest.param(["--sample", "0"], 2, "--sample must be in (0, 1]", id="bad sample"),
        pytest.param(
            ["--capacity-scale", "0"], 2, "--capacity-scale must be above 0", id="bad scale"
        ),
    ],
)
def test_bad_input_is_a_clear_error(
    inputs: tuple[Path, Path], tmp_path: Path, extra: list[str], want_code: int, want: str
) -> None:
    config, trace = inputs
    out = tmp_path / "out"
    args = ["simulate", "--trace", str(trace), "--config", str(config), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, *extra])
    assert result.exit_code == want_code, result.output
    assert want in result.output
    assert not out.exists()  # nothing half-written


def test_needs_exactly_one_cluster(inputs: tuple[Path, Path]) -> None:
    _, trace = inputs
    result = CliRunner().invoke(app, ["simulate", "--trace", str(trace)])
    assert result.exit_code == 2
    assert "give exactly one of --config FILE and --philly-vcs FILE" in result.output


def test_bad_config_is_reported_with_its_problems(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("gpu_types: {h100: {}}\npools: [{name: X}]\n")
    (tmp_path / "t.csv").write_text("submit_time,duration_s,gpus,team\n0,1,1,a\n")
    result = CliRunner().invoke(
        app, ["simulate", "--trace", str(tmp_path / "t.csv"), "--config", str(tmp_path / "c.yaml")]
    )
    assert result.exit_code == 5
    assert "pools" in result.output


def test_workers_give_the_same_numbers(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    config, trace = inputs
    numbers = []
    for workers in ("1", "3"):
        out = tmp_path / f"out-{workers}"
        args = ["simulate", "--trace", str(trace), "--config", str(config), "--out", str(out)]
        result = CliRunner().invoke(app, [*args, "--workers", workers])
        assert result.exit_code == 0, result.output
        metrics = json.loads((out / "metrics.json").read_text())
        for policy in metrics.values():
            for key in ("wall_s", "events_per_s"):
                policy.pop(key)
        numbers.append(metrics)
    assert numbers[0] == numbers[1]
