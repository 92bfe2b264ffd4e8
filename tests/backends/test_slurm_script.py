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
from gpupool.backends.slurm.container import ContainerScript
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


DIR = "/srv/gpupool/slurm/pool-t4/j-42.1"


def container(runtime: str, **overrides: Any) -> ContainerScript:
    values: dict[str, Any] = {
        "runtime": runtime,
        "image": "ghcr.io/acme/train:1.4",
        "name": "gpupool-j-42.1",
        "workdir": f"{DIR}/work",
        "home": "/srv/storage/team-a/home/alice",
        "mounts": (
            (f"{DIR}/work", f"{DIR}/work", False),
            ("/srv/storage/team-a/shared", "/srv/storage/team-a/shared", False),
            ("/srv/storage/team-a/shared/imagenet", "/data", True),
        ),
        "env_names": ("GPUPOOL_JOB_ID",),
        **overrides,
    }
    return ContainerScript(**values)


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
    pytest.param(
        Case(
            "batch_image_pyxis.sh",
            {"image": "ghcr.io/acme/train:1.4", "max_runtime_s": 600},
            {"container": container("pyxis", read_only_root=True, network=True)},
        ),
        id="pyxis: srun --container-image on one node, read-only root",
    ),
    pytest.param(
        Case(
            "batch_image_podman.sh",
            {"image": "ghcr.io/acme/train:1.4"},
            {"container": container("podman", shm_size_gb=8, authfile="/etc/gpupool/acme.json")},
        ),
        id="podman in the allocation: the job's GPU device files, no network, pull secret",
    ),
    pytest.param(
        Case(
            "batch_image_podman_cdi.sh",
            {"image": "ghcr.io/acme/train:1.4"},
            {"container": container("podman", gpu_mode="cdi", network=True)},
        ),
        id="podman with CDI names and the network allowed",
    ),
    pytest.param(
        Case(
            "batch_image_apptainer_gang.sh",
            {"image": "ghcr.io/acme/train:1.4", "nodes": 2},
            {"container": container("apptainer")},
        ),
        id="apptainer on each node of a 2-node gang",
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
