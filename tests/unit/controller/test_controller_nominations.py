"""Preemptions take effect once: the memory of nominations and the livelock of issue 10 (M3).

A preemptor must get the room its victims free; before nominations, the room could go back to
the requeued victim (or to another job), and the preemptor preempted again, in a loop (1,935
preemptions in 3 minutes for 120 short jobs of two teams borrowing from each other).

What is proved (see :mod:`gpupool.scheduler.nominations`): while a preemptor waits (from entering
the queue to its admission) its preemptions are decided in one cycle. So no job is preempted
twice by the same preemptor while it waits, and the preemption decisions of a run are at most
the preemptors' waits: one per preemptor where none is itself preempted (or lost) in between;
the jobs preempted are at most ``preemption_budget`` per decision.
"""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

from gpupool.backends.base import AdapterContext
from gpupool.backends.fake import DURATION_ENV, FakeCluster
from gpupool.backends.registry import PoolBackend, Registry
from gpupool.config import sqlite_url
from gpupool.controller import loop
from gpupool.controller.execution import ExecutionService
from gpupool.controller.loop import Controller
from gpupool.controller.parking import Groups, Parking
from gpupool.scheduler import (
    CycleResult,
    Policy,
    Snapshot,
)
from gpupool.spec.models import (
    ClusterConfig,
    Cohort,
    GpuType,
    NodeShape,
    Pool,
    Quota,
    SchedulerSettings,
    Team,
)
from gpupool.state.db import make_engine, session_factory, upgrade
from gpupool.state.models import AttemptRow, JobRow
from sim.test_sim_controller_parity import EPOCH, VirtualClock, _settle
from support.rows import queued_job
from unit.scheduler.test_scheduler_preemption_bound import one_decision_per_wait

# --- the scenario through the controller ----------------------------------------------


def two_teams_borrowing(home: Path, seed: int) -> list[CycleResult]:
    """120 short jobs of team-a and team-b (nominal 4 each of one 8-GPU node, one cohort)
    through the real controller (SQLite store, the fake backend) on a virtual clock ticking
    every MIN_TICK_GAP_S; every cycle's result."""
    rng = random.Random(seed)
    config = ClusterConfig(
        gpu_types={"h100": GpuType()},
        pools=[Pool(name="p", backend="local", gpu_type="h100", nodes=1, node=NodeShape(gpus=8))],
        cohorts={"c": Cohort()},
        teams={
            "team-a": Team(cohort="c", quota={"h100": Quota(nominal=4)}),
            "team-b": Team(cohort="c", quota={"h100": Quota(nominal=4)}),
        },
        scheduler=SchedulerSettings(cycle_interval_s=0.5, starvation_after_s=None),
    )
    clock = VirtualClock()
    cluster = FakeCluster(clock.monotonic)

    def lookup(name: str) -> PoolBackend | None:
        context = AdapterContext(
            pool=name,
            gpu_type="h100",
            options={"cluster": cluster},
            state_dir=home,
            nodes=1,
            gpus_per_node=8,
        )
        return PoolBackend("fake", context) if name == "p" else None

    jobs = sorted(
        (
            rng.uniform(0, 5),
            f"j{i:03d}",
            ("team-a", "team-b")[i % 2],
            rng.choice([1, 1, 1, 2]),
            rng.uniform(0.5, 3),
        )
        for i in range(120)
    )
    engine = make_engine(sqlite_url(home))
    upgrade(engine)
    sessions = session_factory(engine)
    execution = ExecutionService(Registry(lookup))
    controller = Controller(sessions, lambda: config, execution, clock)
    results: list[CycleResult] = []
    real = Parking.cycle

    def spy(lot: Parking, snapshot: Snapshot, policy: Policy, groups: Groups) -> CycleResult:
        result = real(lot, snapshot, policy, groups)
        results.append(result)
        return result

    Parking.cycle = spy  # type: ignore[method-assign]
    try:
        while clock.t < 120:
            while jobs and jobs[0][0] <= clock.t:
                at, job_id, team, gpus, duration = jobs.pop(0)
                with sessions.begin() as session:
                    session.add(
                        queued_job(
                            job_id,
                            team=team,
                            user="sim",
                            command=["x"],
                            gpus=gpus,
                            env={DURATION_ENV: repr(duration)},
                            submitted_at=EPOCH + timedelta(seconds=at),
                        )
                    )
                controller.wake()
            controller.tick()
            _settle(controller)
            with sessions() as session:
                left = session.query(JobRow).filter(JobRow.finished_at.is_(None)).count()
            if not jobs and not left:
                break
            clock.t += loop.MIN_TICK_GAP_S
        with sessions() as session:
            assert session.query(JobRow).filter(JobRow.finished_at.is_(None)).count() == 0
            attempts = session.query(AttemptRow).count()
        assert attempts <= 120 + sum(len(r.preemptions) for r in results)
        return results
    finally:
        Parking.cycle = real  # type: ignore[method-assign]
        controller.stop()
        execution.close()
        engine.dispose()


def test_two_teams_borrowing_do_not_ping_pong(tmp_path: Path) -> None:
    """Issue 10, M3, through the controller: on the code before the fix a preemptor of this
    run preempted again in the next cycle of the same wait (the room its victim freed had gone
    back to team-a); now each preemptor preempts once while it waits."""
    results = two_teams_borrowing(tmp_path, seed=2)
    decisions, preemptions = one_decision_per_wait(results)
    preemptors = {p.preemptor_id for r in results for p in r.preemptions}
    assert decisions == len(preemptors)  # no preemptor was itself preempted here
    assert preemptions <= 2 * len(preemptors)
