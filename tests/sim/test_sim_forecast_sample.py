"""``gpupool simulate --forecast-sample N``: start forecasts made during a replay, against the
replay's own starts."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpupool.cli.main import app
from gpupool.sim.accuracy import accuracy, attach
from gpupool.sim.cluster import policy_setup
from gpupool.sim.engine import Simulation
from gpupool.sim.trace import TraceJob
from gpupool.spec.load import load_config

CONFIG = """
gpu_types: {h100: {}}
pools:
  - {name: h100-pool, backend: local, gpu_type: h100, nodes: 1, node: {gpus: 4}}
teams:
  team-a: {quota: {h100: {nominal: 4}}}
"""


def job(job_id: str, submit: float, duration: float = 100.0) -> TraceJob:
    return TraceJob(job_id, submit, duration, 4, "team-a", "h100")


# Four 100 s jobs that run one after another, then two more once they are past jobs: the
# second of those waits exactly one (estimated) runtime.
TRACE = [
    job("a1", 0),
    job("a2", 0),
    job("a3", 0),
    job("a4", 0),
    job("b1", 1_000),
    job("b2", 1_000),
]


def test_forecasts_from_past_jobs_are_exact_when_runtimes_repeat(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG, encoding="utf-8")
    setup = policy_setup(load_config(tmp_path / "c.yaml"), "gpupool")
    simulation = Simulation(setup, TRACE, {"team-a": 4})
    sampler = attach(simulation, count=10, seed=0)
    assert sampler is not None
    outcome = simulation.run()
    made = sampler.made
    assert set(made) == {j.job_id for j in TRACE}
    starts = {r.trace.job_id: r.first_start for r in outcome.jobs}
    assert starts["b2"] == 1_100.0
    assert made["b2"].start == 1_100.0  # the running b1's remaining runtime: the median, 100 s
    assert made["b2"].method == "past jobs"
    assert made["b1"].start == 1_000.0 and made["b1"].method == "now"
    # with no past job yet, a4 waits three default runtimes: far from its 300 s
    assert made["a4"].method == "default runtime"
    block = accuracy(sampler, outcome)
    assert block["sampled"] == block["forecast"] == block["started"] == 6
    assert block["beyond_horizon"] == 0
    assert block["median_abs_error_s"] <= block["p90_abs_error_s"]
    assert block["p90_abs_error_s"] > 1_000  # the default-runtime guesses


def test_cli_writes_the_forecast_block_and_report_rows(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG, encoding="utf-8")
    rows = ["submit_time,duration_s,gpus,team,gpu_type,job_id"]
    rows += [f"{t.submit_s:g},{t.duration_s:g},4,team-a,h100,{t.job_id}" for t in TRACE]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    args = ["simulate", "--trace", str(tmp_path / "t.csv"), "--config", str(tmp_path / "c.yaml")]
    args += ["--out", str(out), "--policy", "gpupool", "--no-baselines", "--forecast-sample", "3"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    block = json.loads((out / "metrics.json").read_text())["gpupool"]["forecast"]
    assert block["sampled"] == 3
    assert set(block) >= {"median_abs_error_s", "p90_abs_error_s", "within_range"}
    report = (out / "report.html").read_text()
    assert "start forecast error p90 (h)" in report
    assert "start forecast error p90" in result.output


def test_without_the_flag_there_is_no_forecast_block(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG, encoding="utf-8")
    (tmp_path / "t.csv").write_text(
        "submit_time,duration_s,gpus,team\n0,10,1,team-a\n", encoding="utf-8"
    )
    out = tmp_path / "out"
    args = ["simulate", "--trace", str(tmp_path / "t.csv"), "--config", str(tmp_path / "c.yaml")]
    result = CliRunner().invoke(app, [*args, "--out", str(out), "--no-baselines"])
    assert result.exit_code == 0, result.output
    assert "forecast" not in json.loads((out / "metrics.json").read_text())["gpupool"]
    assert "start forecast error" not in (out / "report.html").read_text()


def test_forecasts_csv_lists_each_forecast_beside_its_start(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG, encoding="utf-8")
    rows = ["submit_time,duration_s,gpus,team,gpu_type,job_id"]
    rows += [f"{t.submit_s:g},{t.duration_s:g},4,team-a,h100,{t.job_id}" for t in TRACE]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    args = ["simulate", "--trace", str(tmp_path / "t.csv"), "--config", str(tmp_path / "c.yaml")]
    args += ["--out", str(out), "--policy", "gpupool", "--no-baselines", "--forecast-sample", "6"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = (out / "forecasts.csv").read_text().splitlines()
    assert lines[0] == (
        "policy,job_id,team,gpus,submit_s,forecast_start_s,earliest_s,latest_s,"
        "actual_start_s,method"
    )
    by_id = {line.split(",")[1]: line.split(",") for line in lines[1:]}
    assert set(by_id) == {j.job_id for j in TRACE}
    assert by_id["b2"][5] == by_id["b2"][8] == "1100.0"
    assert by_id["b2"][9] == "past jobs"
