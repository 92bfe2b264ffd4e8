"""What the controller hands a backend for an attempt: the job's settings reach the spec."""

from __future__ import annotations

from gpupool.backends.base import contract_env
from gpupool.controller.loop import job_spec
from gpupool.spec.models import ClusterConfig, GpuType
from gpupool.state.models import AttemptRow
from support.rows import queued_job

CONFIG = ClusterConfig(gpu_types={"t4": GpuType()})


def attempt() -> AttemptRow:
    return AttemptRow(number=1, pool="p", gpu_type="t4", placements=[{"devices": [0]}])


def test_the_checkpoint_interval_reaches_the_job_as_a_variable() -> None:
    spec = job_spec(queued_job("j-1", checkpoint_interval_s=600), attempt(), CONFIG)
    assert spec.checkpoint_interval_s == 600
    assert contract_env(spec, "w", "i", "o")["GPUPOOL_CHECKPOINT_INTERVAL_S"] == "600"


def test_a_job_without_checkpoints_gets_no_variable() -> None:
    spec = job_spec(queued_job("j-2"), attempt(), CONFIG)
    assert spec.checkpoint_interval_s is None
    assert "GPUPOOL_CHECKPOINT_INTERVAL_S" not in contract_env(spec, "w", "i", "o")
