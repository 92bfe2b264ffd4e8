"""The usage ledger (gpupool.state.usage) on SQLite and PostgreSQL: hours, borrowed GPUs,
outcomes, capacity and gaps, and, over random histories with restarts and crashes, every
millisecond counted exactly once."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import delete, select, update

from gpupool.accounting.hours import epoch_ms, from_ms
from gpupool.config import sqlite_url
from gpupool.controller.accounting import Accrual
from gpupool.controller.leader import SoleLeader
from gpupool.spec.models import Accounting, ClusterConfig, GpuType, NodeShape, Pool
from gpupool.state import usage
from gpupool.state.db import SessionFactory, make_engine, session_factory, upgrade
from gpupool.state.models import (
    AccountingGapRow,
    AccountingStateRow,
    CapacityHourRow,
    UsageDayRow,
    UsageHourRow,
    UsageRow,
)
from support.databases import scratch_database

T0 = datetime(2026, 12, 31, 22, 30, tzinfo=UTC)  # crosses midnight, a month and a year
HOUR = timedelta(hours=1)
MS_HOUR = 3_600_000
GAP_AFTER = timedelta(hours=3)
CONFIG = ClusterConfig(
    gpu_types={"h100": GpuType()},
    pools=[
        Pool(name="p1", backend="local", gpu_type="h100", nodes=2, node=NodeShape(gpus=8)),
        Pool(name="p2", backend="local", gpu_type="h100", nodes=1, node=NodeShape(gpus=4)),
        Pool(name="cpu", backend="local", gpu_type="h100", nodes=3, node=NodeShape(gpus=0)),
    ],
    accounting=Accounting(accrual_interval_s=60, gap_after_s=GAP_AFTER.total_seconds()),
)
CAPACITY_GPUS = 2 * 8 + 4
POOLS = [
    usage.PoolGpus("p1", "h100", "dedicated", 16),
    usage.PoolGpus("p2", "h100", "spot", 4),
    usage.PoolGpus("cpu", "h100", "dedicated", 0),
]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SessionFactory]:
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = sqlite_url(tmp_path_factory.mktemp("usage"))
        else:
            url = stack.enter_context(scratch_database("gpupool_usage"))
        engine = make_engine(url)
        upgrade(engine)
        yield session_factory(engine)
        engine.dispose()


def empty(sessions: SessionFactory) -> SessionFactory:
    """The store with an empty ledger (each test, each hypothesis example)."""
    with sessions.begin() as session:
        for table in (UsageRow, UsageHourRow, UsageDayRow, CapacityHourRow, AccountingGapRow):
            session.execute(delete(table))
        session.execute(update(AccountingStateRow).values(accrued_until=None))
    return sessions


@pytest.fixture
def ledger(store: SessionFactory) -> SessionFactory:
    return empty(store)


def open_row(
    sessions: SessionFactory,
    attempt_id: int,
    at: datetime,
    gpus: int = 4,
    borrowed: int = 0,
    team: str = "team-a",
    pool: str = "p1",
) -> bool:
    with sessions.begin() as session:
        return usage.open_attempt(
            session,
            attempt_id=attempt_id,
            job_id=f"j{attempt_id}",
            job_name=f"job {attempt_id}",
            team=team,
            user="alice",
            gpu_type="h100",
            pool=pool,
            backend="local",
            priority_class="training",
            node_type="spot" if pool == "p2" else "dedicated",
            gpus=gpus,
            borrowed=borrowed,
            at=at,
        )


def hours(sessions: SessionFactory) -> dict[tuple[datetime, str], tuple[int, int]]:
    with sessions() as session:
        rows = session.execute(
            select(
                UsageHourRow.hour,
                UsageHourRow.team,
                UsageHourRow.gpu_ms,
                UsageHourRow.borrowed_gpu_ms,
            )
        ).all()
    return {(r.hour, r.team): (r.gpu_ms, r.borrowed_gpu_ms) for r in rows}


def row(sessions: SessionFactory, attempt_id: int) -> UsageRow:
    with sessions() as session:
        found = session.get(UsageRow, attempt_id)
        assert found is not None
        return found


# -- hours, borrowed GPUs, outcomes ---------------------------------------------------------


def test_accrual_splits_at_hours_and_moves_the_row_with_its_hours(ledger: SessionFactory) -> None:
    open_row(ledger, 1, T0 + timedelta(minutes=20), gpus=4, borrowed=1)  # 22:50
    with ledger.begin() as session:
        assert usage.accrue(session, T0 + timedelta(minutes=45)) == 1  # 23:15
    assert hours(ledger) == {
        (T0 - timedelta(minutes=30), "team-a"): (4 * 600_000, 600_000),
        (T0 + timedelta(minutes=30), "team-a"): (4 * 900_000, 900_000),
    }
    found = row(ledger, 1)
    assert (found.gpu_ms, found.borrowed_gpu_ms) == (4 * 1_500_000, 1_500_000)
    assert found.accrued_until == T0 + timedelta(minutes=45) and found.ended_at is None
    with ledger.begin() as session:  # nothing new to count: no statement moves anything
        assert usage.accrue(session, T0 + timedelta(minutes=45)) == 0


def test_closing_counts_up_to_the_end_and_records_the_outcome(ledger: SessionFactory) -> None:
    open_row(ledger, 1, T0, gpus=2)
    with ledger.begin() as session:
        usage.accrue(session, T0 + timedelta(minutes=10))
        assert usage.close_attempt(session, 1, T0 + timedelta(minutes=70), "preempted")
        assert not usage.close_attempt(session, 1, T0 + timedelta(minutes=80), "failed")
    found = row(ledger, 1)
    assert found.outcome == "preempted" and found.ended_at == T0 + timedelta(minutes=70)
    assert found.gpu_ms == 2 * 70 * 60_000 == sum(ms for ms, _ in hours(ledger).values())


def test_an_attempt_is_opened_once(ledger: SessionFactory) -> None:
    assert open_row(ledger, 1, T0)
    assert not open_row(ledger, 1, T0 + HOUR, gpus=8)
    assert row(ledger, 1).started_at == T0 and row(ledger, 1).gpus == 4


@pytest.mark.parametrize("outcome", sorted(usage.OUTCOMES))
def test_every_end_is_an_outcome(ledger: SessionFactory, outcome: str) -> None:
    open_row(ledger, 1, T0)
    with ledger.begin() as session:
        usage.close_attempt(session, 1, T0 + HOUR, outcome)
    assert row(ledger, 1).outcome == outcome


@pytest.mark.parametrize("status", ["running", "admitted", "queued", "exploded"])
def test_a_status_that_is_no_end_is_refused(status: str) -> None:
    with pytest.raises(ValueError, match="is not an end"):
        usage.outcome_of(status)


def test_a_row_accrued_past_its_end_ends_where_it_was_accrued_to(ledger: SessionFactory) -> None:
    open_row(ledger, 1, T0)
    with ledger.begin() as session:
        usage.accrue(session, T0 + HOUR)
        usage.close_attempt(session, 1, T0 + timedelta(minutes=59), "succeeded")
    found = row(ledger, 1)
    assert found.ended_at == found.accrued_until == T0 + HOUR
    assert found.gpu_ms == 4 * MS_HOUR


def test_totals_past_32_bits_are_exact(ledger: SessionFactory) -> None:
    open_row(ledger, 1, T0, gpus=64, borrowed=64)
    open_row(ledger, 2, T0, gpus=64)
    with ledger.begin() as session:
        usage.accrue(session, T0 + timedelta(days=3))
        usage.close_attempt(session, 2, T0 + timedelta(days=6), "succeeded")
    assert row(ledger, 1).borrowed_gpu_ms == 64 * 3 * 86_400_000 > 2**31
    assert row(ledger, 2).gpu_ms == 64 * 6 * 86_400_000


def test_borrowed_gpus_never_exceed_the_attempts(ledger: SessionFactory) -> None:
    open_row(ledger, 1, T0, gpus=2, borrowed=5)
    assert row(ledger, 1).borrowed == 2


# -- capacity and gaps ----------------------------------------------------------------------


def capacity(sessions: SessionFactory) -> dict[tuple[datetime, str], int]:
    with sessions() as session:
        rows = session.execute(select(CapacityHourRow)).scalars().all()
    return {(r.hour, r.pool): r.gpu_ms for r in rows}


def gaps(sessions: SessionFactory) -> list[tuple[datetime, datetime, str]]:
    with sessions() as session:
        rows = session.execute(select(AccountingGapRow).order_by(AccountingGapRow.start))
        return [(r.start, r.end, r.reason) for r in rows.scalars()]


def test_capacity_fills_each_hour_with_each_pools_gpus(ledger: SessionFactory) -> None:
    with ledger.begin() as session:
        assert usage.accrue_capacity(session, T0, POOLS, GAP_AFTER) is None  # sets the mark
        assert usage.accrue_capacity(session, T0 + HOUR, POOLS, GAP_AFTER) is None
    half = 30 * 60_000
    assert capacity(ledger) == {
        (T0 - timedelta(minutes=30), "p1"): 16 * half,
        (T0 + timedelta(minutes=30), "p1"): 16 * half,
        (T0 - timedelta(minutes=30), "p2"): 4 * half,
        (T0 + timedelta(minutes=30), "p2"): 4 * half,
    }
    with ledger() as session:
        assert usage.accrued_until(session) == T0 + HOUR


def test_a_late_accrual_records_a_gap_and_no_capacity_but_usage_counts(
    ledger: SessionFactory,
) -> None:
    open_row(ledger, 1, T0, gpus=1)
    with ledger.begin() as session:
        usage.accrue_capacity(session, T0, POOLS, GAP_AFTER)
    late = T0 + GAP_AFTER + timedelta(seconds=1)
    with ledger.begin() as session:
        usage.accrue(session, late)
        gap = usage.accrue_capacity(session, late, POOLS, GAP_AFTER)
    assert gap == usage.Gap(T0, late)
    assert gaps(ledger) == [(T0, late, usage.GAP_REASON)]
    assert capacity(ledger) == {}
    assert row(ledger, 1).gpu_ms == epoch_ms(late) - epoch_ms(T0)  # it held its GPU meanwhile
    with ledger.begin() as session:  # on time again: capacity from the gap's end
        assert usage.accrue_capacity(session, late + timedelta(minutes=1), POOLS, GAP_AFTER) is None
    assert sum(capacity(ledger).values()) == CAPACITY_GPUS * 60_000


def test_a_mark_ahead_of_the_clock_waits_for_it(ledger: SessionFactory) -> None:
    with ledger.begin() as session:
        usage.accrue_capacity(session, T0 + HOUR, POOLS, GAP_AFTER)
        assert usage.accrue_capacity(session, T0, POOLS, GAP_AFTER) is None
    with ledger() as session:
        assert usage.accrued_until(session) == T0 + HOUR
    assert capacity(ledger) == {}


# -- every millisecond once, whatever happens -----------------------------------------------


@dataclass(frozen=True)
class Attempt:
    gpus: int
    borrowed: int
    start_us: int  # microseconds after T0: ends fall inside milliseconds too
    length_us: int | None  # None: still running at the end
    team: str
    pool: str
    outcome: str


attempts_st = st.lists(
    st.builds(
        Attempt,
        gpus=st.integers(1, 64),
        borrowed=st.integers(0, 64),
        start_us=st.integers(0, 30 * 3_600_000_000),
        length_us=st.one_of(st.none(), st.integers(0, 20 * 3_600_000_000)),
        team=st.sampled_from(["team-a", "team-b"]),
        pool=st.sampled_from(["p1", "p2"]),
        outcome=st.sampled_from(sorted(usage.OUTCOMES)),
    ),
    max_size=8,
)
# (when, what): accrue; restart (a new controller's accrual: forgets when it last ran);
# crash an accrual, or the next close, half way through its statements (rolled back).
controller_st = st.lists(
    st.tuples(
        st.integers(0, 52 * 3_600_000_000),
        st.sampled_from(["accrue", "restart", "crash-accrual", "crash-close"]),
    ),
    max_size=25,
)


class Crash(Exception):
    pass


class Clock:
    def __init__(self) -> None:
        self.at = T0

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return (self.at - T0).total_seconds()


@contextlib.contextmanager
def crashing(step: str) -> Iterator[None]:
    """``step`` of ``state.usage`` runs (its statements reach the store), then the
    transaction dies: a crash between two statements of one accrual or close."""
    real = getattr(usage, step)

    def run_then_die(session: Any, *args: Any) -> Any:
        real(session, *args)
        session.flush()
        raise Crash

    with mock.patch.object(usage, step, run_then_die), pytest.raises(Crash):
        yield


def overlap_ms(a: int, b: int, lo: int, hi: int) -> int:
    return max(0, min(b, hi) - max(a, lo))


def check_history(
    sessions: SessionFactory, attempts: list[Attempt], events: list[tuple[int, str]]
) -> None:
    at = lambda us: T0 + timedelta(microseconds=us)  # noqa: E731
    timeline: list[tuple[int, int, str, int]] = []  # (time, order, what, which)
    for i, a in enumerate(attempts):
        timeline.append((a.start_us, 0, "open", i))
        if a.length_us is not None:
            timeline.append((a.start_us + a.length_us, 1, "close", i))
    for j, (when, what) in enumerate(events):
        timeline.append((when, 2, what, j))
    clock = Clock()
    accrual = Accrual(sessions, lambda: CONFIG, clock, SoleLeader())
    crash_next_close = False
    mark: datetime | None = None  # the model of accounting_state.accrued_until
    covered: list[tuple[int, int]] = []  # spans that got capacity
    want_gaps: list[tuple[int, int]] = []
    for when, _, what, i in sorted(timeline):
        clock.at = at(when)
        if what == "open":
            a = attempts[i]
            open_row(sessions, i + 1, clock.at, a.gpus, a.borrowed, a.team, a.pool)
        elif what == "close":
            if crash_next_close:
                crash_next_close = False
                with crashing("_add_hours"), sessions.begin() as session:
                    usage.close_attempt(session, i + 1, clock.at, attempts[i].outcome)
            with sessions.begin() as session:  # the poll is applied again: the same end
                assert usage.close_attempt(session, i + 1, clock.at, attempts[i].outcome)
        elif what == "crash-close":
            crash_next_close = True
        elif what == "crash-accrual":
            with crashing("accrue_capacity"):
                accrual.run()
        else:
            if what == "restart":
                accrual = Accrual(sessions, lambda: CONFIG, clock, SoleLeader())
            accrual.run()
            if mark is not None and clock.at > mark:
                span = (epoch_ms(mark), epoch_ms(clock.at))
                (want_gaps if clock.at - mark > GAP_AFTER else covered).append(span)
            if mark is None or clock.at > mark:
                mark = clock.at

    with sessions() as session:
        rows = session.execute(select(UsageRow).order_by(UsageRow.attempt_id)).scalars().all()
        hour_rows = session.execute(select(UsageHourRow)).scalars().all()
        day_rows = session.execute(select(UsageDayRow)).scalars().all()
        capacity_rows = session.execute(select(CapacityHourRow)).scalars().all()
        gap_rows = session.execute(select(AccountingGapRow)).scalars().all()
    assert len(rows) == len(attempts)
    want_hours: dict[tuple[datetime, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for r, a in zip(rows, attempts, strict=True):
        start = epoch_ms(at(a.start_us))
        if a.length_us is not None:  # closed: complete, with its outcome
            assert r.ended_at == r.accrued_until == at(a.start_us + a.length_us)
            assert r.outcome == a.outcome
        else:
            assert r.ended_at is None and r.outcome is None
        span = epoch_ms(r.accrued_until) - start
        borrowed = min(a.borrowed, a.gpus)
        assert (r.gpu_ms, r.borrowed_gpu_ms) == (a.gpus * span, borrowed * span)
        end = epoch_ms(r.accrued_until)
        for hour_ms in range(start // MS_HOUR * MS_HOUR, end, MS_HOUR):
            ms = overlap_ms(start, end, hour_ms, hour_ms + MS_HOUR)
            if ms:
                added = want_hours[(from_ms(hour_ms), a.team, a.pool)]
                added[0] += a.gpus * ms
                added[1] += borrowed * ms
    got_hours = {(h.hour, h.team, h.pool): [h.gpu_ms, h.borrowed_gpu_ms] for h in hour_rows}
    assert got_hours == dict(want_hours)
    assert sum(h.gpu_ms for h in hour_rows) == sum(r.gpu_ms for r in rows)
    # The daily rollups are the hours summed per UTC day, key by key.
    want_days: dict[tuple[datetime, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for (hour, team, pool), (ms, borrowed) in want_hours.items():
        added = want_days[(hour.replace(hour=0), team, pool)]
        added[0] += ms
        added[1] += borrowed
    got_days = {(d.day, d.team, d.pool): [d.gpu_ms, d.borrowed_gpu_ms] for d in day_rows}
    assert got_days == {k: v for k, v in want_days.items() if v != [0, 0]}

    assert sorted((epoch_ms(g.start), epoch_ms(g.end)) for g in gap_rows) == want_gaps
    covered_ms = sum(b - a for a, b in covered)
    assert sum(c.gpu_ms for c in capacity_rows) == CAPACITY_GPUS * covered_ms
    for c in capacity_rows:  # and each hour holds exactly the covered part of it
        lo = epoch_ms(c.hour)
        pool_gpus = {p.pool: p.gpus for p in POOLS}[c.pool]
        assert c.gpu_ms == pool_gpus * sum(overlap_ms(a, b, lo, lo + MS_HOUR) for a, b in covered)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(attempts=attempts_st, events=controller_st)
def test_random_histories_count_every_millisecond_once(
    store: SessionFactory, attempts: list[Attempt], events: list[tuple[int, str]]
) -> None:
    check_history(empty(store), attempts, events)


def test_a_history_across_a_gap_a_restart_and_crashes(ledger: SessionFactory) -> None:
    """One history spelled out: what the property test draws at random."""
    us = lambda hours: int(hours * 3_600_000_000)  # noqa: E731
    attempts = [
        Attempt(8, 2, us(0.2), us(6), "team-a", "p1", "succeeded"),
        Attempt(3, 0, us(1.5), None, "team-b", "p2", "lost"),
        Attempt(1, 1, us(2.9), us(0.05), "team-a", "p2", "preempted"),
    ]
    events = [
        (us(0.1), "accrue"),
        (us(1.0), "crash-accrual"),
        (us(1.2), "accrue"),
        (us(2.0), "restart"),
        (us(2.5), "crash-close"),
        (us(5.5), "restart"),  # 3.5 h after the last accrual: a gap
        (us(7.0), "accrue"),
    ]
    check_history(ledger, attempts, events)
    assert len(gaps(ledger)) == 1
