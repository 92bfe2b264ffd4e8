"""Trace loading: the generic CSV and the Philly CSV, bad rows reported by line."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from gpupool.sim.trace import TraceError, TraceJob, load_trace


@dataclass(frozen=True)
class Case:
    text: str
    trace_format: str = "generic"
    want_jobs: list[TraceJob] = field(default_factory=list)
    want_problems: list[str] = field(default_factory=list)  # "line N: <start of message>"


CASES = [
    pytest.param(
        Case(
            "submit_time,duration_s,gpus,team\n30,100,2,a\n10,50,1,b\n",
            want_jobs=[TraceJob("j3", 0.0, 50.0, 1, "b"), TraceJob("j2", 20.0, 100.0, 2, "a")],
        ),
        id="seconds are made relative to the first submit, jobs sorted by submit",
    ),
    pytest.param(
        Case(
            "job_id,submit_time,duration_s,gpus,team,gpu_type,priority_class,nodes\n"
            "x,2017-10-01T00:00:00,60,16,a,h100,training,2\n"
            "y,2017-10-01 00:01:00,60,1,a,,,\n",
            want_jobs=[
                TraceJob("x", 0.0, 60.0, 16, "a", "h100", "training", 2),
                TraceJob("y", 60.0, 60.0, 1, "a"),
            ],
        ),
        id="ISO times and the optional columns",
    ),
    pytest.param(
        Case(
            "submit_time,duration_s,gpus,team,checkpoint_interval_s\n0,60,1,a,600\n1,60,1,a,\n"
            "2,60,1,a,0\n",
            want_jobs=[
                TraceJob("j2", 0.0, 60.0, 1, "a", checkpoint_interval_s=600),
                TraceJob("j3", 1.0, 60.0, 1, "a"),
            ],
            want_problems=["line 4: checkpoint_interval_s must be a whole number >= 1"],
        ),
        id="checkpoint intervals: whole seconds, empty = none",
    ),
    pytest.param(
        Case(
            "submit_time,duration_s,gpus,team\n0,100,1,a\n5,-3,1,a\n6,10,1.5,a\n7,10,1,\n"
            "soon,10,1,a\n",
            want_jobs=[TraceJob("j2", 0.0, 100.0, 1, "a")],
            want_problems=[
                "line 3: duration_s must be",
                "line 4: gpus must be a whole number",
                "line 5: team is empty",
                "line 6: submit_time 'soon' is neither seconds nor an ISO time",
            ],
        ),
        id="bad rows are reported with their line and skipped",
    ),
    pytest.param(
        Case(
            "job_id,submit_time,duration_s,gpus,team\nx,0,10,1,a\nx,1,10,1,a\n",
            want_jobs=[TraceJob("x", 0.0, 10.0, 1, "a")],
            want_problems=["line 3: job_id 'x' appears twice"],
        ),
        id="a repeated job id is reported",
    ),
    pytest.param(
        Case(
            "submit_time,duration_s,gpus,team\n0,10,1,a\n2017-10-01 00:00:00,10,1,a\n",
            want_jobs=[TraceJob("j2", 0.0, 10.0, 1, "a")],
            want_problems=["line 3: submit_time mixes seconds and ISO times"],
        ),
        id="seconds and ISO times are not mixed",
    ),
    pytest.param(
        Case(
            "timestamp,duration,num_gpus,gpu_time,cluster\n"
            "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
            "2017-10-09 06:13:03,2951.0,8,23608.0,6214e9\n",
            trace_format="philly",
            want_jobs=[
                TraceJob("philly-3", 0.0, 2951.0, 8, "6214e9"),
                TraceJob("philly-2", 2932.0, 66.0, 1, "11cb48"),
            ],
        ),
        id="philly rows: each virtual cluster is a team",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_load_trace(case: Case, tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(case.text, encoding="utf-8")
    trace = load_trace(path, case.trace_format)
    assert trace.jobs == case.want_jobs
    got = [str(p) for p in trace.problems]
    assert len(got) == len(case.want_problems), got
    for message, want in zip(got, case.want_problems, strict=True):
        assert message.startswith(want)


@pytest.mark.parametrize(
    ("text", "trace_format", "want"),
    [
        pytest.param("", "generic", "is empty", id="empty file"),
        pytest.param("a,b\n1,2\n", "generic", "has no column submit_time", id="wrong columns"),
        pytest.param(
            "submit_time,duration_s,gpus,team\n", "philly", "--trace-format generic", id="format"
        ),
        pytest.param("x\n", "parquet", "unknown trace format", id="unknown format"),
    ],
)
def test_unreadable_traces_name_the_fix(
    text: str, trace_format: str, want: str, tmp_path: Path
) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(TraceError, match=want):
        load_trace(path, trace_format)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read trace"):
        load_trace(tmp_path / "nope.csv")
