"""The Slurm adapter on the real cluster of scripts/slurm/up.sh, beyond the contract suite:
users (D3), gangs and capacity."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gpupool.backends.base import AdapterContext, PosixIdentity, RunState
from gpupool.backends.slurm.adapter import SlurmBackend

if TYPE_CHECKING:
    from conftest import SlurmHarness

pytestmark = pytest.mark.timeout(60)
NOBODY = PosixIdentity(65534, 65534)


@pytest.fixture
def shared_root() -> Iterator[Path]:
    """A workdir_root other uids can traverse (pytest's tmp_path is 0700 root)."""
    root = Path(tempfile.mkdtemp(prefix="gpupool-slurm-test-", dir="/tmp"))
    os.chmod(root, 0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")
def test_a_job_runs_as_the_users_uid_and_gid(slurm: SlurmHarness, shared_root: Path) -> None:
    ctx = AdapterContext(
        pool=slurm.ctx.pool,
        gpu_type="t4",
        options={**slurm.ctx.options, "workdir_root": str(shared_root)},
        state_dir=slurm.ctx.state_dir,
    )
    backend = slurm.backend = SlurmBackend(ctx)
    script = 'echo "uid=$(id -u) gid=$(id -g)"; touch "$GPUPOOL_OUTPUTS/result"'
    spec = replace(slurm.spec("as-user", posix=NOBODY), command=("sh", "-c", script))

    handle = backend.submit(spec)
    status = slurm.wait(handle)

    log = backend.logs(handle).data.decode()
    assert status.state == RunState.SUCCEEDED, log
    assert "uid=65534 gid=65534" in log
    made = Path(handle.data["workdir"]) / "outputs" / "result"
    assert (made.stat().st_uid, made.stat().st_gid) == (65534, 65534)
    # The adapter's own records stay root's: the job cannot forge them.
    assert (Path(handle.data["workdir"]) / "submitted.json").stat().st_uid == 0


def test_a_gang_runs_the_command_once_on_each_node(slurm: SlurmHarness) -> None:
    spec = slurm.spec("gang", nodes=2, gpus_per_node=1)

    handle = slurm.backend.submit(spec)
    status = slurm.wait(handle)

    assert status.state == RunState.SUCCEEDED, slurm.backend.logs(handle).data.decode()
    assert slurm.runs(spec) == 2
    assert slurm.env_seen(spec)["CUDA_VISIBLE_DEVICES"] in {"2", "3"}  # a t4 of its node


def test_capacity_counts_the_partitions_gpus_of_the_pools_type(slurm: SlurmHarness) -> None:
    capacity = slurm.backend.capacity()  # type: ignore[attr-defined]
    assert [n.name for n in capacity.nodes] == ["gpupool-n1", "gpupool-n2"]
    assert capacity.gpus == 4  # 2 t4 per node
    assert 0 <= capacity.gpus_free <= capacity.gpus
