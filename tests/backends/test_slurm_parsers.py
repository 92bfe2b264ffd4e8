"""Parsers of Slurm's output (``slurm/parsers.py``), on output recorded from the real cluster of
scripts/slurm/up.sh (``testdata/slurm/``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from gpupool.backends.slurm.parsers import (
    ExitRecord,
    NodeCapacity,
    SqueueRow,
    decode_wait_status,
    parse_exit_file,
    parse_sbatch_parsable,
    parse_sinfo_capacity,
    parse_squeue,
)

DATA = Path(__file__).parent / "testdata" / "slurm"


def recorded(name: str) -> str:
    return (DATA / name).read_text()


def test_sbatch_parsable_recorded() -> None:
    assert parse_sbatch_parsable(recorded("sbatch_parsable.txt")) == "38"


@pytest.mark.parametrize(
    ("stdout", "want"),
    [
        pytest.param("123;gpupool\n", "123", id="multi-cluster: id;cluster"),
        pytest.param("sbatch: warning: x\n7\n", "7", id="a warning line before the id"),
    ],
)
def test_sbatch_parsable_forms(stdout: str, want: str) -> None:
    assert parse_sbatch_parsable(stdout) == want


@pytest.mark.parametrize("stdout", ["", "Submitted batch job 5\n", "12_1\n"])
def test_sbatch_parsable_rejects_other_output(stdout: str) -> None:
    with pytest.raises(ValueError, match="sbatch"):
        parse_sbatch_parsable(stdout)


def test_squeue_recorded_states() -> None:
    rows = {row.name: row for row in parse_squeue(recorded("squeue_mixed_states.txt"))}

    assert rows["rec-ok"] == SqueueRow("39", "COMPLETED", "None", 0, "rec-ok")
    assert rows["rec-exit3"] == SqueueRow("40", "FAILED", "NonZeroExitCode", 768, "rec-exit3")
    assert rows["rec-killed"].exit_status == 9
    assert rows["rec-cancelled"].state == "CANCELLED"
    assert rows["rec-timeout"].state == "RUNNING"
    assert rows["rec-running"].reason.startswith("Nodes required for job are DOWN")
    assert len(rows) == 8


def test_squeue_recorded_timeout() -> None:
    (row,) = parse_squeue(recorded("squeue_timeout.txt"))
    assert (row.state, row.reason) == ("TIMEOUT", "TimeLimit")
    assert decode_wait_status(row.exit_status or 0) == (143, 15)  # Slurm's SIGTERM


def test_squeue_rejects_an_unexpected_line() -> None:
    with pytest.raises(ValueError, match="squeue line 2"):
        parse_squeue("1|RUNNING|None|0|a|\nJOBID PARTITION NAME\n")


def test_squeue_rejects_array_job_ids() -> None:
    with pytest.raises(ValueError, match="plain number"):
        parse_squeue("12_3|RUNNING|None|0|a|\n")


@dataclass(frozen=True)
class WaitCase:
    status: int
    want: tuple[int, int | None]


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(WaitCase(0, (0, None)), id="success"),
        pytest.param(WaitCase(768, (3, None)), id="exit 3 is 3 << 8"),
        pytest.param(WaitCase(36608, (143, None)), id="exit 143 after a SIGTERM trap"),
        pytest.param(WaitCase(9, (137, 9)), id="killed by SIGKILL: 128 + 9"),
    ],
)
def test_decode_wait_status(case: WaitCase) -> None:
    assert decode_wait_status(case.status) == case.want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("exit_code=0 reason=exited\n", ExitRecord(0, "exited"), id="exited"),
        pytest.param(
            "exit_code=124 reason=max_runtime max_runtime_s=1\n",
            ExitRecord(124, "max_runtime", 1),
            id="timeout(1) stopped it",
        ),
        pytest.param("", None, id="empty: not ended yet"),
        pytest.param("exit_code=0 reas", None, id="half written"),
        pytest.param("exit_code=x reason=exited\n", None, id="garbage"),
    ],
)
def test_exit_file(text: str, want: ExitRecord | None) -> None:
    assert parse_exit_file(text) == want


def test_sinfo_capacity_of_one_gpu_type() -> None:
    capacity = parse_sinfo_capacity(recorded("sinfo_h100.txt"), "h100")

    assert capacity.nodes == (
        NodeCapacity("gpupool-n1", "mixed", 2, 0),
        NodeCapacity("gpupool-n2", "idle", 2, 0),
    )
    assert (capacity.usable_nodes, capacity.gpus, capacity.gpus_free) == (2, 4, 4)


def test_sinfo_counts_a_node_in_two_partitions_once() -> None:
    capacity = parse_sinfo_capacity(recorded("sinfo_all_partitions.txt"), "h100")
    assert [n.name for n in capacity.nodes] == ["gpupool-n1", "gpupool-n2"]
    assert (capacity.gpus, capacity.gpus_free) == (4, 2)  # n2 runs a 2-GPU job


def test_sinfo_a_draining_node_is_not_usable() -> None:
    capacity = parse_sinfo_capacity(recorded("sinfo_t4_one_draining.txt"), "t4")
    assert (capacity.usable_nodes, capacity.gpus, capacity.gpus_free) == (1, 2, 2)


@pytest.mark.parametrize(
    ("state", "usable"),
    [("idle", True), ("mixed", True), ("allocated", True), ("idle*", False),
     ("down", False), ("drained", False), ("mixed+drain", False), ("maint", False)],
)  # fmt: skip
def test_node_states(state: str, usable: bool) -> None:
    assert NodeCapacity("n", state, 1, 0).usable is usable


def test_gres_index_lists_with_commas() -> None:
    text = "n1|mixed|gpu:t4:4(S:0-1)|gpu:t4:2(IDX:0,2),gpu:h100:0(IDX:N/A)|\n"
    capacity = parse_sinfo_capacity(text, "t4")
    assert (capacity.gpus, capacity.gpus_free) == (4, 2)
