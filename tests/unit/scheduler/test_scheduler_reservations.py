"""Shortcuts of starvation reservations (gpupool.scheduler.reservations) against the full path.

The reservations remember the running jobs' ends, skip what-if releases that cannot help, and
let a starving job that could hold no room reuse an identical job's reasons. Each test checks a
shortcut against the answer computed without it.
"""

from __future__ import annotations

import random

import pytest

from gpupool.scheduler import (
    NodeView,
    PendingJob,
    Placement,
    Policy,
    PoolView,
    QuotaView,
    RunningJob,
    Snapshot,
    TeamView,
    run_cycle,
)
from gpupool.scheduler import reservations as reservations_module
from gpupool.scheduler.assignment import FitMode, assign, job_shape
from gpupool.scheduler.capacity import PoolRoom, Shape
from gpupool.scheduler.reservations import Reservation, Reservations
from gpupool.scheduler.workspace import Workspace

NOW = 10_000.0


def _snapshot(seed: int, pending: int = 150) -> Snapshot:
    """Busy pools (running jobs with and without an end) and many starving and fresh jobs."""
    rng = random.Random(seed)
    pools, running = [], []
    for gpu_type in ("h100", "t4"):
        for p in range(2):
            name = f"{gpu_type}-{p}"
            nodes = []
            for n in range(6):
                node = f"{name}-n{n}"
                used = rng.randint(0, 8)
                nodes.append(
                    NodeView(node, 8, 64.0, 512.0, frozenset(range(used)), used * 8.0, used * 64.0)
                )
                if used:
                    running.append(
                        RunningJob(
                            f"r-{node}",
                            f"team-{rng.randrange(5)}",
                            rng.randrange(3),
                            gpu_type,
                            name,
                            (Placement(node, tuple(range(used))),),
                            cpus=used * 8.0,
                            memory_gb=used * 64.0,
                            ends_by=rng.choice((None, NOW + rng.uniform(0, 5_000))),
                        )
                    )
            pools.append(PoolView(name, gpu_type, "local", tuple(nodes)))
    teams = {
        f"team-{t}": TeamView(
            f"team-{t}",
            "research" if t < 3 else None,
            quota={"h100": QuotaView(16, 16), "t4": QuotaView(24)},
        )
        for t in range(5)
    }
    jobs = []
    for i in range(pending):
        gpus = rng.choice((1, 2, 4, 8))
        jobs.append(
            PendingJob(
                f"job-{i:03}",
                f"team-{rng.randrange(5)}",
                rng.randrange(3),
                NOW - rng.uniform(0, 2_000),
                gpus,
                nodes=rng.choice((1, 1, 1, 2)),
                cpus=gpus * 8.0,
                memory_gb=gpus * 64.0,
                gpu_types=rng.choice(((), ("h100",), ("t4", "h100"))),
                max_runtime_s=rng.choice((None, 600.0, 3_000.0, 20_000.0)),
            )
        )
    return Snapshot(NOW, tuple(pools), teams, tuple(running), tuple(jobs))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("after", [None, 0.0, 500.0, 1_500.0])
@pytest.mark.parametrize("budget", [0, 10])
def test_shortcuts_decide_as_the_full_path(
    seed: int, after: float | None, budget: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot = _snapshot(seed)
    policy = Policy(starvation_after_s=after, preemption_budget=budget)
    fast = run_cycle(snapshot, policy)
    monkeypatch.setattr(Reservations, "may_reserve", lambda self, job, types: True)
    monkeypatch.setattr(reservations_module, "_releasing_could_help", lambda items, shape: True)
    assert run_cycle(snapshot, policy) == fast


def test_ends_are_extended_with_each_admission() -> None:
    snapshot = _snapshot(3, pending=0)
    ws = Workspace(snapshot)
    kept = Reservations(ws, Policy(starvation_after_s=0.0))
    before = {k: list(v) for k, v in kept._ends().items()}
    assert before == Reservations(ws, Policy())._ends()
    for i, gpus in enumerate((1, 2, 1)):
        job = PendingJob(f"a{i}", "team-0", 0, NOW, gpus, cpus=1.0, memory_gb=1.0)
        outcome = assign(job, ("h100", "t4"), ws)
        assert outcome.mode is FitMode.FIT and outcome.pick is not None
        pick = outcome.pick
        ws.apply("team-0", outcome.gpu_type, pick.pool, pick.nodes, job_shape(job), NOW + i)
        assert kept._ends() == Reservations(ws, Policy())._ends()
    assert kept._ends() != before


def test_releasing_helps_only_where_a_node_gains_room() -> None:
    view = PoolView(
        "p", "h100", "local", (NodeView("n0", 8, 64.0, 512.0, frozenset(range(6)), 48.0, 384.0),)
    )
    pool = PoolRoom(view)
    held = pool.hold(0, (6, 7), 16.0, 128.0)  # the node's last two devices
    starving = PendingJob("s", "t", 0, 0.0, 2)
    reservation = Reservation(starving, "h100", pool, (0,), 100.0, [held])

    def helps(gpus: int, cpus: float = 0.0) -> bool:
        return reservations_module._releasing_could_help([reservation], Shape(gpus, 1, cpus, 0))

    assert helps(2)  # fits only once the hold is given up
    assert helps(1, cpus=16.0)
    assert not helps(3)  # too large even then
    assert not helps(2, cpus=40.0)
    held_nothing = pool.hold(0, (), 0.0, 0.0)
    assert not reservations_module._releasing_could_help(
        [Reservation(starving, "h100", pool, (0,), 100.0, [held_nothing])], Shape(1, 1, 0.0, 0.0)
    )
