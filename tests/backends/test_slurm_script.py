"""The rendered sbatch script (``slurm/script.py``) against golden files.

Regenerate after an intended change with ``GPUPOOL_UPDATE_GOLDEN=1 pytest -k slurm_script``
and review the diff."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpupool.backends.base import JobSpec
from gpupool.backends.slurm.script import ScriptOptions, render_batch_script, time_limit_minutes

GOLDEN = Path(__file__).parent / "testdata" / "slurm"


@dataclass(frozen=True)
class Case:
    golden: str
    spec: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)


def spec_of(**overrides: Any) -> JobSpec:
    values: dict[str, Any] = {
        "job_id": "j-42",
        "attempt": 1,
        "team": "team-a",
        "user": "alice",
        "command": ("python", "train.py", "--lr", "0.1"),
        "pool": "pool-t4",
        "gpu_type": "t4",
        "gpus_per_node": 2,
        **overrides,
    }
    return JobSpec(**values)


def render(case: Case) -> str:
    spec = spec_of(**case.spec)
    opts = ScriptOptions(
        job_name=f"gpupool-{spec.key}",
        partition="t4",
        gres_type="t4",
        attempt_dir="/srv/gpupool/slurm/pool-t4/" + spec.key,
        **case.options,
    )
    env = {"GPUPOOL_JOB_ID": spec.job_id, **spec.env}
    return render_batch_script(spec, env, opts)


CASES = [
    pytest.param(
        Case(
            "batch_single_node.sh",
            {"cpus": 3.5, "memory_gb": 12, "max_runtime_s": 3600, "env": {"NOTE": "it's $HOME"}},
            {"account": "research", "qos": "normal", "max_runtime_grace_s": 30},
        ),
        id="one node, 2 GPUs, max runtime, account and qos, a value needing quotes",
    ),
    pytest.param(
        Case("batch_gang_no_gpus.sh", {"nodes": 2, "gpus_per_node": 0, "attempt": 3}),
        id="a 2-node gang without GPUs runs under srun",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_batch_script_matches_golden(case: Case) -> None:
    got = render(case)
    path = GOLDEN / case.golden
    if os.environ.get("GPUPOOL_UPDATE_GOLDEN"):
        path.write_text(got)
    assert got == path.read_text()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("case", CASES)
def test_batch_script_is_valid_bash(case: Case) -> None:
    subprocess.run(["bash", "-n"], input=render(case), text=True, check=True)


@pytest.mark.parametrize(
    ("runtime_s", "grace_s", "want"),
    [(1, 1, 2), (59, 1, 2), (60, 0, 2), (3600, 30, 62)],
)
def test_time_limit_is_a_backstop_of_whole_minutes(
    runtime_s: int, grace_s: float, want: int
) -> None:
    assert time_limit_minutes(runtime_s, grace_s) == want
