"""The simulator decides what the production controller decides.

The same small traces run twice: through the simulator, and through the real
:class:`~gpupool.controller.loop.Controller` (SQLite store, execution service, the ``fake``
backend) driven on a virtual clock: arrivals are inserted as the job service stores them, and
the clock jumps to the next submit or run end, where the controller ticks until nothing moves.
Every job's start and end must agree, a preempted one's too: in both, the victim's next attempt
runs its command again from the start (a job without checkpoints loses the work it did). Jobs
the simulator reports as unschedulable are not submitted to the controller.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpupool.backends.base import AdapterContext
from gpupool.backends.fake import DURATION_ENV, FakeCluster
from gpupool.backends.registry import PoolBackend, Registry
from gpupool.config import sqlite_url
from gpupool.controller.execution import ExecutionService
from gpupool.controller.loop import MIN_TICK_GAP_S, Controller
from gpupool.sim.cluster import PolicySetup, policy_setup, scaled
from gpupool.sim.engine import simulate
from gpupool.sim.trace import TraceJob
from gpupool.spec.models import Cohort, Preemption
from gpupool.state.db import make_engine, session_factory, upgrade
from gpupool.state.models import JobRow
from sim.test_sim_golden import BORROW, CONFIG, HEAD_OF_LINE, NOMINAL, RECLAIM, job
from support.rows import queued_job

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class VirtualClock:
    def __init__(self) -> None:
        self.t = 0.0

    def now(self) -> datetime:
        return EPOCH + timedelta(seconds=self.t)

    def monotonic(self) -> float:
        return self.t


def run_controller(
    setup: PolicySetup, trace: list[TraceJob], home: Path, moments: tuple[float, ...] = ()
) -> dict[str, tuple]:
    """Each job's (start, end) under the real controller; the clock also stops at each of
    ``moments`` (a budget period's end, say)."""
    clock = VirtualClock()
    cluster = FakeCluster(clock.monotonic)
    pools = {p.name: p for p in setup.config.pools}

    def lookup(name: str) -> PoolBackend | None:
        pool = pools.get(name)
        if pool is None:
            return None
        context = AdapterContext(
            pool=name,
            gpu_type=pool.gpu_type,
            options={"cluster": cluster},
            state_dir=home,
            nodes=pool.nodes,
            gpus_per_node=pool.node.gpus,
        )
        return PoolBackend("fake", context)

    engine = make_engine(sqlite_url(home))
    upgrade(engine)
    sessions = session_factory(engine)
    execution = ExecutionService(Registry(lookup))
    controller = Controller(sessions, lambda: setup.config, execution, clock)
    waiting = sorted(trace, key=lambda j: (j.submit_s, j.job_id))
    try:
        while True:
            while waiting and waiting[0].submit_s <= clock.t:
                _insert(sessions, waiting.pop(0), setup, clock.now())
                controller.wake()  # as the job service does after storing a submit
            for _ in range(6):  # sync -> schedule -> dispatch -> sync sees it running ...
                controller.tick()
                _settle(controller)
            ends = [
                run.starts_at + run.duration_s
                for key in _keys(sessions)
                if (run := cluster.run(key)) is not None
                and run.starts_at + run.duration_s > clock.t
            ]
            later = [t for t in moments if t > clock.t][:1]
            # Autoscaled pools: a node comes up or idles out (the simulator's moments too).
            scaling = controller.autoscaler.next_change(setup.config, clock.t)
            later += [scaling] if scaling != float("inf") else []
            upcoming = [*(j.submit_s for j in waiting[:1]), *ends, *later]
            if not upcoming:
                break
            clock.t = min(upcoming)
        with sessions() as session:
            rows = session.query(JobRow).all()
            return {
                row.name: (
                    None if row.started_at is None else (row.started_at - EPOCH).total_seconds(),
                    None if row.finished_at is None else (row.finished_at - EPOCH).total_seconds(),
                )
                for row in rows
            }
    finally:
        controller.stop()
        execution.close()
        engine.dispose()


def _insert(sessions, job: TraceJob, setup: PolicySetup, now: datetime) -> None:  # type: ignore[no-untyped-def]
    with sessions.begin() as session:
        session.add(
            queued_job(
                f"j-{job.job_id}",
                name=job.job_id,
                team=setup.team_of(job.team),
                user="sim",
                command=["simulated"],
                env={DURATION_ENV: repr(job.duration_s)},
                gpus=job.gpus,
                submitted_at=now,
            )
        )


def _keys(sessions) -> list[str]:  # type: ignore[no-untyped-def]
    with sessions() as session:
        return [f"{row.id}.{row.attempt}" for row in session.query(JobRow).all() if row.attempt]


def _settle(controller: Controller) -> None:
    """Let the backend calls the tick started finish (they run on the execution threads)."""
    controller.wait_backend_calls()
    deadline = time.monotonic() + 10
    while controller._inflight and time.monotonic() < deadline:
        time.sleep(0.002)


FIFO_CASE = [job("a1", 0, 100, 3, "a"), job("b1", 5, 100, 2, "b"), job("a2", 6, 100, 1, "a")]
RANDOM = [
    job(f"r{i:02d}", rng.randrange(0, 600, 7), rng.randrange(20, 300), rng.choice([1, 1, 2, 3]), t)
    for rng in [random.Random(7)]
    for i, t in enumerate(rng.choice("ab") for _ in range(40))
]
# The cohort of CONFIG without reclaim: these traces must not preempt (the next test does).
NO_RECLAIM = CONFIG.model_copy(
    update={"cohorts": {"c": Cohort(preemption=Preemption(within_team="never", reclaim="never"))}}
)


@pytest.mark.parametrize(
    ("policy", "trace"),
    [
        pytest.param("hard-quota-fifo", BORROW, id="hard quota"),
        pytest.param("gpupool", BORROW, id="borrowing"),
        pytest.param("hard-quota-fifo", HEAD_OF_LINE, id="strict FIFO"),
        pytest.param("gpupool", HEAD_OF_LINE, id="best-effort FIFO"),
        pytest.param("fifo", FIFO_CASE, id="one global FIFO"),
        pytest.param("gpupool", RANDOM, id="40 random jobs, borrowing"),
        pytest.param("hard-quota-fifo", RANDOM, id="40 random jobs, hard quotas"),
        pytest.param("fifo", RANDOM, id="40 random jobs, one FIFO"),
    ],
)
def test_simulator_and_controller_agree(policy: str, trace: list[TraceJob], tmp_path: Path) -> None:
    setup = policy_setup(NO_RECLAIM, policy)
    outcome = simulate(setup, trace, NOMINAL)
    assert outcome.preemptions == 0
    # Jobs that can never run under the policy are reported by the simulator and never
    # submitted (in a strict FIFO queue they would block their team for good).
    runnable = [r for r in outcome.jobs if not r.unschedulable]
    simulated = {r.trace.job_id: (r.first_start, r.end) for r in runnable}
    assert all(end is not None for _, end in simulated.values())
    controlled = run_controller(setup, [r.trace for r in runnable], tmp_path)
    assert controlled == pytest.approx(simulated)


# b's jobs reclaim the GPUs a borrows; a's victims start over when room comes back.
RECLAIMS = [*RECLAIM, job("b2", 400, 50, 2, "b"), job("a3", 450, 80, 1, "a")]


@pytest.mark.parametrize(
    "trace",
    [
        pytest.param(RECLAIM, id="one reclaim: the victim reruns from the start"),
        pytest.param(RECLAIMS, id="two reclaims, then a job beside the rerun"),
    ],
)
def test_a_preempted_job_reruns_from_the_start_in_both(
    trace: list[TraceJob], tmp_path: Path
) -> None:
    setup = policy_setup(CONFIG, "gpupool")
    outcome = simulate(setup, trace, NOMINAL)
    victims = [r for r in outcome.jobs if r.preempted]
    assert victims and all(r.lost_gpu_s > 0 for r in victims)
    simulated = {r.trace.job_id: (r.first_start, r.end) for r in outcome.jobs}
    controlled = run_controller(setup, trace, tmp_path)
    # This harness ticks the controller at one virtual instant until nothing moves, where the
    # simulator leaves MIN_TICK_GAP_S between the cycle that preempts and the one that admits:
    # times may differ by that much per preemption. Resuming instead of rerunning would move
    # the victim's end by the 100 s it ran.
    gap = MIN_TICK_GAP_S * outcome.preemptions + 1e-6
    assert controlled.keys() == simulated.keys()
    for job_id, times in simulated.items():
        assert controlled[job_id] == pytest.approx(times, abs=gap), job_id


def test_a_used_up_budget_holds_the_team_in_both(tmp_path: Path) -> None:
    """A hold budget used up by a's first job keeps its next one waiting, in the simulator and
    in the controller, until the budget's next week begins (sim/budgets.py)."""
    from sim.test_sim_budgets import NEXT_WEEK, TRACE, with_budget

    setup = policy_setup(with_budget(period="week", gpu_hours=2, enforcement="hold"), "gpupool")
    outcome = simulate(setup, TRACE, NOMINAL)
    simulated = {r.trace.job_id: (r.first_start, r.end) for r in outcome.jobs}
    assert simulated["a2"] == (NEXT_WEEK, NEXT_WEEK + 100)
    controlled = run_controller(setup, TRACE, tmp_path, moments=(NEXT_WEEK,))
    assert controlled == pytest.approx(simulated)


def test_autoscaled_pools_come_up_and_go_alike_in_both(tmp_path: Path) -> None:
    """A pool of at most two 4-GPU nodes, autoscaled from zero (nodes come up 100 s after they
    are asked for, go after 50 s idle): jobs start when their nodes are up, in both."""
    two_nodes = CONFIG.model_copy(
        update={"pools": [CONFIG.pools[0].model_copy(update={"nodes": 2})]}
    )
    config = scaled(two_nodes, "autoscale", provision_delay_s=100, idle_timeout_s=50)
    trace = [job("a1", 0, 300, 2, "a"), job("b1", 10, 200, 4, "b"), job("a2", 700, 100, 1, "a")]
    setup = policy_setup(config, "gpupool")
    outcome = simulate(setup, trace, NOMINAL)
    simulated = {r.trace.job_id: (r.first_start, r.end) for r in outcome.jobs}
    assert simulated["a1"][0] == 100 and simulated["a2"][0] == 800  # scaled to zero between
    controlled = run_controller(setup, trace, tmp_path)
    assert controlled == pytest.approx(simulated)
