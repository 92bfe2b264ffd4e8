"""What the controller hands a backend for an attempt: the job's settings reach the spec."""

from __future__ import annotations

from gpupool.backends.base import ContainerSpec, Mount, contract_env
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


def test_the_image_and_its_container_settings_reach_the_spec() -> None:
    record = {
        "image": "localhost/x:1",
        "pull_secret": "acme",
        "mounts": [{"source": "shared/d", "target": "/d", "read_only": True}],
        "shm_size_gb": 2.0,
        "read_only_root": True,
    }
    spec = job_spec(queued_job("j-3", container=record), attempt(), CONFIG)
    assert spec.image == "localhost/x:1"
    assert spec.container == ContainerSpec(
        pull_secret="acme",
        mounts=(Mount("shared/d", "/d", True),),
        shm_size_gb=2.0,
        read_only_root=True,
    )


def test_a_job_without_an_image_has_no_container() -> None:
    spec = job_spec(queued_job("j-4"), attempt(), CONFIG)
    assert (spec.image, spec.container) == (None, None)
