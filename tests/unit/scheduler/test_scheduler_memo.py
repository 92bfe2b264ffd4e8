"""Fine-grained epochs of the workspace and the memo built on them (gpupool.scheduler.memo)."""

from __future__ import annotations

import pytest

from gpupool.scheduler import NodeView, PendingJob, PoolView, QuotaView, Snapshot, TeamView
from gpupool.scheduler.assignment import FitMode, assign, job_shape
from gpupool.scheduler.memo import AssignMemo, job_key
from gpupool.scheduler.snapshot import ReasonCode
from gpupool.scheduler.workspace import Workspace


def _workspace() -> Workspace:
    def pool(name: str, gpu_type: str) -> PoolView:
        nodes = tuple(NodeView(f"{name}-{i}", 4, 32.0, 256.0) for i in range(2))
        return PoolView(name, gpu_type, "local", nodes)

    teams = {
        "a": TeamView("a", "c1", quota={"h100": QuotaView(2, 0)}),
        "b": TeamView("b", "c1", quota={"h100": QuotaView(4)}),
        "x": TeamView("x", "c2", quota={"h100": QuotaView(4), "t4": QuotaView(4)}),
        "solo": TeamView("solo", None, quota={"h100": QuotaView(4)}),
    }
    return Workspace(Snapshot(0.0, (pool("h", "h100"), pool("t", "t4")), teams))


def _admit(ws: Workspace, team: str, gpu_type: str, gpus: int) -> None:
    pending = PendingJob(f"{team}-{gpus}", team, 0, 0.0, gpus)
    outcome = assign(pending, (gpu_type,), ws)
    assert outcome.mode is FitMode.FIT and outcome.pick is not None
    ws.apply(team, gpu_type, outcome.pick.pool, outcome.pick.nodes, job_shape(pending))


@pytest.mark.parametrize(
    ("team", "gpu_type", "moved", "kept"),
    [
        pytest.param("x", "t4", [("x", "t4")], [("a", "h100"), ("x", "h100")], id="other type"),
        pytest.param("b", "h100", [("a", "h100")], [("x", "h100"), ("solo", "h100")], id="cohort"),
        pytest.param("solo", "h100", [("solo", "h100")], [("a", "h100")], id="no cohort"),
    ],
)
def test_an_admission_moves_only_the_epochs_it_changes(
    team: str, gpu_type: str, moved: list[tuple[str, str]], kept: list[tuple[str, str]]
) -> None:
    ws = _workspace()
    before = {k: ws.quota_epoch(*k) for k in moved + kept}
    rooms = {f: ws.room_epoch(f) for f in ("h100", "t4")}
    _admit(ws, team, gpu_type, 1)
    assert all(ws.quota_epoch(*k) != before[k] for k in moved)
    assert all(ws.quota_epoch(*k) == before[k] for k in kept)
    assert ws.room_epoch(gpu_type) != rooms[gpu_type]
    other = "t4" if gpu_type == "h100" else "h100"
    assert ws.room_epoch(other) == rooms[other]


def test_claims_and_reservations_move_everything() -> None:
    ws = _workspace()
    stamp = ws.type_stamp("a", "h100")
    ws.moved_everything()
    assert ws.type_stamp("a", "h100") != stamp


def test_a_quota_failure_survives_room_changes_of_other_cohorts() -> None:
    """Team a is at its ceiling: its QUOTA answer is reused after x admits on h100 and
    recomputed (with the new numbers) once its cohort's usage moves."""
    ws = _workspace()
    memo = AssignMemo(ws)
    _admit(ws, "a", "h100", 2)
    waiting = PendingJob("w", "a", 0, 0.0, 1)
    key = job_key(waiting, ("h100",))
    first = memo.assign(waiting, ("h100",), key)
    assert [r.code for r in first.reasons] == [ReasonCode.QUOTA]
    _admit(ws, "x", "h100", 1)
    again = memo.assign(waiting, ("h100",), key)
    assert again.reasons[0] is first.reasons[0]  # reused, not rebuilt
    _admit(ws, "b", "h100", 1)
    assert memo.assign(waiting, ("h100",), key) == assign(waiting, ("h100",), ws)
