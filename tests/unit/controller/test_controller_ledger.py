"""The controller keeps the usage ledger: rows open and close with the attempts' statuses, in
the same transaction; accrual runs every interval on the leader only; and through the real
controller and the fake backend on a virtual clock, a run with a preemption leaves one row
per attempt with its outcome and exact totals."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, func, select, update

from gpupool.accounting.hours import epoch_ms
from gpupool.backends.base import AdapterContext, BackendStatus, RunState
from gpupool.backends.fake import DURATION_ENV, EXIT_CODE_ENV, FakeCluster
from gpupool.backends.registry import PoolBackend, Registry
from gpupool.config import sqlite_url
from gpupool.controller.accounting import Accrual, gap_after
from gpupool.controller.execution import ExecutionService
from gpupool.controller.leader import LeaseLost, SoleLeader
from gpupool.controller.loop import Controller
from gpupool.controller.transitions import apply_status
from gpupool.spec.models import (
    Accounting,
    Autoscale,
    ClusterConfig,
    GpuType,
    NodeShape,
    Pool,
    PriorityClass,
    Quota,
    SchedulerSettings,
    Team,
)
from gpupool.state import jobs, queue, usage
from gpupool.state.db import Session, SessionFactory, make_engine, session_factory, upgrade
from gpupool.state.models import (
    AccountingGapRow,
    AccountingStateRow,
    AttemptRow,
    CapacityHourRow,
    JobRow,
    UsageHourRow,
    UsageRow,
)
from sim.test_sim_controller_parity import EPOCH, VirtualClock, _settle
from support.databases import scratch_database
from support.rows import queued_job

IDS = itertools.count()
CONFIG = ClusterConfig(
    gpu_types={"h100": GpuType(), "t4": GpuType()},
    pools=[
        Pool(name="p", backend="local", gpu_type="h100", nodes=1, node=NodeShape(gpus=4)),
        Pool(
            name="q",
            backend="slurm",  # runs gangs (every pool is served by the fake backend here)
            gpu_type="t4",
            nodes=2,
            node=NodeShape(gpus=1),
            autoscale=Autoscale(node_type="spot"),
        ),
    ],
    priority_classes={
        "low": PriorityClass(value=0, default=True),
        "high": PriorityClass(value=100),
    },
    teams={"team-a": Team(quota={"h100": Quota(nominal=4), "t4": Quota(nominal=2)})},
    scheduler=SchedulerSettings(starvation_after_s=None),
    accounting=Accounting(accrual_interval_s=300),
)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SessionFactory]:
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = sqlite_url(tmp_path_factory.mktemp("ledger"))
        else:
            url = stack.enter_context(scratch_database("gpupool_ledger"))
        engine = make_engine(url)
        upgrade(engine)
        yield session_factory(engine)
        engine.dispose()


@pytest.fixture
def sessions(store: SessionFactory) -> SessionFactory:
    """The store with no jobs and an empty ledger."""
    with store.begin() as session:
        for table in (UsageRow, UsageHourRow, CapacityHourRow, AccountingGapRow):
            session.execute(delete(table))
        session.execute(delete(AttemptRow))
        session.execute(delete(JobRow))
        session.execute(update(AccountingStateRow).values(accrued_until=None))
    return store


# -- the status change writes the ledger ----------------------------------------------------


def admitted(sessions: SessionFactory, gpus: int = 2, nodes: int = 1, borrowed: int = 0) -> str:
    job_id = f"led-{next(IDS):05d}"
    with sessions.begin() as session:
        jobs.add(session, queued_job(job_id, gpus=gpus, nodes=nodes, priority_class="low"))
        session.flush()
        queue.admit(
            session,
            job_id,
            0,
            pool="q",
            gpu_type="t4",
            placements=[],
            borrowed=borrowed,
            now=EPOCH,
        )
        session.flush()
        attempt = jobs.attempts(session, job_id)[0]
        attempt.handle = {"backend": "slurm", "pool": "q", "provider_id": "1", "key": "k"}
    return job_id


def report(
    sessions: SessionFactory, job_id: str, status: BackendStatus, minutes: float
) -> AttemptRow:
    with sessions.begin() as session:
        found = jobs.active_attempt(session, job_id, 1)
        assert found is not None
        at = EPOCH + timedelta(minutes=minutes)
        apply_status(session, found[0], found[1], status, at, CONFIG)
        return found[1]


def ledger_row(sessions: SessionFactory, attempt_id: int) -> UsageRow | None:
    with sessions() as session:
        return session.get(UsageRow, attempt_id)


def mark_victim(sessions: SessionFactory, job_id: str) -> None:
    with sessions.begin() as session:
        queue.mark_victim(session, job_id, "someone", "reclaim", EPOCH)


@dataclass(frozen=True)
class End:
    state: RunState
    victim: bool
    want: str


ENDS = [
    pytest.param(End(RunState.SUCCEEDED, False, "succeeded"), id="succeeded"),
    pytest.param(End(RunState.FAILED, False, "failed"), id="failed"),
    pytest.param(End(RunState.CANCELLED, False, "cancelled"), id="cancelled"),
    pytest.param(End(RunState.PREEMPTED, False, "preempted"), id="preempted by the backend"),
    pytest.param(End(RunState.CANCELLED, True, "preempted"), id="signalled for a preemptor"),
    pytest.param(End(RunState.LOST, False, "lost"), id="lost"),
]


@pytest.mark.parametrize("end", ENDS)
def test_an_attempt_seen_running_has_a_row_closed_with_its_outcome(
    sessions: SessionFactory, end: End
) -> None:
    job_id = admitted(sessions, gpus=1, nodes=2, borrowed=1)
    attempt = report(sessions, job_id, BackendStatus(RunState.RUNNING), 10)
    opened = ledger_row(sessions, attempt.id)
    assert opened is not None and opened.ended_at is None
    assert (opened.gpus, opened.borrowed, opened.node_type, opened.backend) == (
        2,
        1,
        "spot",
        "slurm",
    )
    assert opened.started_at == attempt.started_at
    if end.victim:
        mark_victim(sessions, job_id)
    ended = report(sessions, job_id, BackendStatus(end.state), 70)
    closed = ledger_row(sessions, attempt.id)
    assert closed is not None
    assert (closed.outcome, closed.ended_at) == (end.want, ended.finished_at)
    assert closed.gpu_ms == 2 * 60 * 60_000 and closed.borrowed_gpu_ms == 60 * 60_000


@pytest.mark.parametrize(
    ("state", "row"),
    [
        pytest.param(RunState.SUCCEEDED, True, id="succeeded between two polls: ran unseen"),
        pytest.param(RunState.FAILED, True, id="failed between two polls"),
        pytest.param(RunState.CANCELLED, False, id="cancelled before it started"),
        pytest.param(RunState.LOST, False, id="lost before it started"),
    ],
)
def test_an_attempt_never_seen_running(
    sessions: SessionFactory, state: RunState, row: bool
) -> None:
    job_id = admitted(sessions)
    attempt = report(sessions, job_id, BackendStatus(state), 5)
    found = ledger_row(sessions, attempt.id)
    if not row:
        assert found is None
        return
    assert found is not None and found.outcome == state.value
    assert found.started_at == found.ended_at == attempt.finished_at and found.gpu_ms == 0


def forget_row(sessions: SessionFactory, attempt_id: int) -> None:
    """As if the attempt had started before the ledger was kept."""
    with sessions.begin() as session:
        session.execute(delete(UsageRow).where(UsageRow.attempt_id == attempt_id))


def test_an_attempt_running_from_before_the_ledger_is_counted_from_its_start(
    sessions: SessionFactory,
) -> None:
    ended = admitted(sessions, gpus=2)
    ended_attempt = report(sessions, ended, BackendStatus(RunState.RUNNING), 0)
    forget_row(sessions, ended_attempt.id)
    report(sessions, ended, BackendStatus(RunState.SUCCEEDED), 30)  # its end opens and closes it
    found = ledger_row(sessions, ended_attempt.id)
    assert found is not None and (found.outcome, found.gpu_ms) == ("succeeded", 2 * 30 * 60_000)

    running = admitted(sessions, gpus=1)
    attempt = report(sessions, running, BackendStatus(RunState.RUNNING), 0)
    forget_row(sessions, attempt.id)
    clock = VirtualClock()
    clock.t = 600.0
    Accrual(sessions, lambda: CONFIG, clock, SoleLeader()).run()  # a term's first accrual
    found = ledger_row(sessions, attempt.id)
    assert found is not None and found.started_at == EPOCH and found.gpu_ms == 600_000


def test_a_failed_status_change_leaves_no_ledger_row(sessions: SessionFactory) -> None:
    job_id = admitted(sessions)

    class Boom(Exception):
        pass

    with pytest.raises(Boom), sessions.begin() as session:
        found = jobs.active_attempt(session, job_id, 1)
        assert found is not None
        apply_status(session, found[0], found[1], BackendStatus(RunState.RUNNING), EPOCH, CONFIG)
        raise Boom
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(UsageRow)) == 0


# -- accrual: every interval, leader only ---------------------------------------------------


class Deposed(SoleLeader):
    def fence(self, session: Session) -> None:
        raise LeaseLost("not ours")


def test_accrual_runs_once_an_interval_and_again_at_a_new_term(sessions: SessionFactory) -> None:
    clock = VirtualClock()
    accrual = Accrual(sessions, lambda: CONFIG, clock, SoleLeader())
    assert accrual.maybe_run()
    clock.t = 299.0
    assert not accrual.maybe_run()
    clock.t = 300.0
    assert accrual.maybe_run()
    clock.t = 301.0
    accrual.forget()
    assert accrual.maybe_run()
    with sessions() as session:
        assert session.scalar(select(func.sum(CapacityHourRow.gpu_ms))) == 6 * 301_000


def test_a_deposed_leader_accrues_nothing(sessions: SessionFactory) -> None:
    clock = VirtualClock()
    Accrual(sessions, lambda: CONFIG, clock, SoleLeader()).run()
    clock.t = 60.0
    with pytest.raises(LeaseLost):
        Accrual(sessions, lambda: CONFIG, clock, Deposed()).run()
    with sessions() as session:
        assert session.scalar(select(func.count()).select_from(CapacityHourRow)) == 0


def test_the_gap_threshold_defaults_to_three_intervals_and_slack() -> None:
    assert gap_after(CONFIG) == timedelta(seconds=3 * 300 + 30)
    tight = CONFIG.model_copy(update={"accounting": Accounting(gap_after_s=5)})
    assert gap_after(tight) == timedelta(seconds=5)


# -- end to end: the real controller, the fake backend, a preemption ------------------------


def test_a_run_with_a_preemption_leaves_one_exact_row_per_attempt(
    sessions: SessionFactory, tmp_path: Path
) -> None:
    clock = VirtualClock()
    clock.t = 50 * 60.0  # 00:50: the run crosses hours
    cluster = FakeCluster(clock.monotonic)
    shapes = {p.name: p for p in CONFIG.pools}

    def lookup(name: str) -> PoolBackend | None:
        pool = shapes[name]
        context = AdapterContext(
            pool=name,
            gpu_type=pool.gpu_type,
            options={"cluster": cluster},
            state_dir=tmp_path,
            nodes=pool.nodes,
            gpus_per_node=pool.node.gpus,
        )
        return PoolBackend("fake", context)

    execution = ExecutionService(Registry(lookup))
    controller = Controller(sessions, lambda: CONFIG, execution, clock)

    def submit(
        name: str, gpus: int, hours: float, priority: int, nodes: int = 1, **env: str
    ) -> None:
        with sessions.begin() as session:
            jobs.add(
                session,
                queued_job(
                    name,
                    name=name,
                    gpus=gpus,
                    nodes=nodes,
                    gpu_types=["t4"] if env.get(EXIT_CODE_ENV) else ["h100"],
                    priority=priority,
                    priority_class="high" if priority else "low",
                    env={DURATION_ENV: str(hours * 3600), **env},
                    submitted_at=clock.now(),
                ),
            )
        controller.wake()

    def run_until(t: float) -> None:
        while clock.t < t:
            for _ in range(4):
                controller.tick()
                _settle(controller)
            clock.t += 150.0

    try:
        submit("low", 4, 2.0, 0)
        submit("fails", 1, 0.4, 0, nodes=2, **{EXIT_CODE_ENV: "3"})  # a gang of 2 nodes
        run_until(clock.t + 1800)
        submit("high", 2, 1.0, 100)  # preempts low, which runs again after it
        run_until(clock.t + 5 * 3600)
    finally:
        controller.stop()
        execution.close()

    with sessions() as session:
        attempts = session.execute(
            select(JobRow.name, AttemptRow).join(AttemptRow, AttemptRow.job_id == JobRow.id)
        ).all()
        rows = {r.attempt_id: r for r in session.execute(select(UsageRow)).scalars()}
        hours = session.execute(select(UsageHourRow)).scalars().all()
        capacity = session.scalar(select(func.sum(CapacityHourRow.gpu_ms)))
        gaps = session.scalar(select(func.count()).select_from(AccountingGapRow))
    outcomes = sorted((name, a.number, rows[a.id].outcome) for name, a in attempts)
    assert outcomes == [
        ("fails", 1, "failed"),
        ("high", 1, "succeeded"),
        ("low", 1, "preempted"),
        ("low", 2, "succeeded"),
    ]
    assert len(rows) == len(attempts)
    for _, attempt in attempts:
        row = rows[attempt.id]
        assert (row.started_at, row.ended_at) == (attempt.started_at, attempt.finished_at)
        span = epoch_ms(attempt.finished_at) - epoch_ms(attempt.started_at)
        assert span > 0 and row.gpu_ms == row.gpus * span
    assert {r.node_type for r in rows.values() if r.pool == "q"} == {"spot"}
    assert sum(h.gpu_ms for h in hours) == sum(r.gpu_ms for r in rows.values())
    assert len({h.hour for h in hours}) >= 4  # split over the hours it ran in
    # capacity: 6 GPUs from the first accrual (the controller's first tick) to the last
    with sessions() as session:
        mark = usage.accrued_until(session)
    assert gaps == 0 and mark is not None
    assert capacity == 6 * (epoch_ms(mark) - epoch_ms(EPOCH + timedelta(minutes=50)))
