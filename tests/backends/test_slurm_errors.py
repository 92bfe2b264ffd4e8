"""Slurm failures onto backend errors (``slurm/errors.py``): what the caller should do."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpupool.backends.errors import (
    BackendError,
    BackendMisconfigured,
    BackendRejected,
    BackendUnavailable,
)
from gpupool.backends.slurm.commands import SlurmClientMissing, SlurmCommandError
from gpupool.backends.slurm.errors import map_slurm_errors

RECORDED = (Path(__file__).parent / "testdata" / "slurm" / "sbatch_errors.txt").read_text()


def command_error(stderr: str) -> SlurmCommandError:
    return SlurmCommandError(["sbatch", "--parsable"], 1, stderr)


@pytest.mark.parametrize(
    ("raised", "want"),
    [
        pytest.param(
            command_error(
                "sbatch: error: Batch job submission failed: "
                "Unable to contact slurm controller (connect failure)"
            ),
            BackendUnavailable,
            id="controller down: retry",
        ),
        pytest.param(
            command_error("squeue: error: slurm_receive_msg: Socket timed out on send/recv"),
            BackendUnavailable,
            id="controller busy: retry",
        ),
        pytest.param(
            command_error(RECORDED.splitlines()[0]),
            BackendRejected,
            id="recorded: no node has the requested gres",
        ),
        pytest.param(
            command_error("sbatch: error: Invalid generic resource (gres) specification"),
            BackendRejected,
            id="invalid gres",
        ),
        pytest.param(
            command_error("\n".join(RECORDED.splitlines()[1:])),
            BackendMisconfigured,
            id="recorded: the pool's partition does not exist",
        ),
        pytest.param(
            command_error("sbatch: error: Batch job submission failed: Invalid account"),
            BackendMisconfigured,
            id="the pool's account does not exist",
        ),
        pytest.param(
            command_error("sbatch: error: something new"), BackendUnavailable, id="unknown: retry"
        ),
        pytest.param(
            SlurmClientMissing("'sbatch' not found"), BackendMisconfigured, id="no client"
        ),
        pytest.param(
            subprocess.TimeoutExpired(["squeue"], 30), BackendUnavailable, id="command timed out"
        ),
        pytest.param(ValueError("squeue line 1"), BackendUnavailable, id="unparsable output"),
        pytest.param(PermissionError(13, "denied"), BackendMisconfigured, id="workdir not ours"),
        pytest.param(OSError(28, "no space"), BackendUnavailable, id="disk full"),
    ],
)
def test_errors_are_classified_and_chained(raised: Exception, want: type[BackendError]) -> None:
    with pytest.raises(BackendError) as info, map_slurm_errors("submit a job"):
        raise raised
    assert type(info.value) is want
    assert info.value.__cause__ is raised
    assert str(info.value).startswith("slurm cannot submit a job")


def test_backend_errors_pass_through() -> None:
    error = BackendRejected("already classified")
    with pytest.raises(BackendRejected) as info, map_slurm_errors("poll"):
        raise error
    assert info.value is error
