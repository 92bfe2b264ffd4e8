"""The controller's queue state (gpupool.controller.state) and the change log it reads
(gpupool.state.changes): after any sequence of writes through the store's repositories, a
state brought up to date incrementally equals one loaded whole."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupool.backends.base import BackendStatus, RunState
from gpupool.config import sqlite_url
from gpupool.controller.state import QueueState
from gpupool.controller.transitions import apply_status
from gpupool.core.jobs import JobStatus
from gpupool.state import changes, jobs, queue
from gpupool.state.db import SessionFactory, make_engine, session_factory, upgrade
from support.databases import scratch_database
from support.rows import T0, queued_job

IDS = itertools.count()


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SessionFactory]:
    """A store of each kind (the change log is written differently on each)."""
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = sqlite_url(tmp_path_factory.mktemp("store"))
        else:
            url = stack.enter_context(scratch_database("gpupool_queue_state"))
        engine = make_engine(url)
        upgrade(engine)
        yield session_factory(engine)
        engine.dispose()


def fresh(sessions: SessionFactory) -> QueueState:
    state = QueueState()
    with sessions() as session:
        state.load(session)
    return state


def same(a: QueueState, b: QueueState) -> bool:
    return a.groups() == b.groups() and a.running() == b.running()


def submit(sessions: SessionFactory, team: str, priority: int = 0) -> str:
    job_id = f"j{next(IDS):05d}"
    with sessions.begin() as session:
        jobs.add(session, queued_job(job_id, team=team, priority=priority))
    return job_id


def admit(sessions: SessionFactory, job_id: str, node: int = 0) -> None:
    with sessions.begin() as session:
        row = jobs.get(session, job_id)
        assert row is not None
        queue.admit(
            session,
            job_id,
            row.attempt,
            pool="p",
            gpu_type="h100",
            placements=[{"node": f"p-{node}", "devices": [0]}],
            borrowed=0,
            now=T0,
        )


def report(sessions: SessionFactory, job_id: str, state: RunState) -> None:
    """What a backend's poll does to the job's current attempt."""
    with sessions.begin() as session:
        row = jobs.get(session, job_id)
        assert row is not None
        found = jobs.active_attempt(session, job_id, row.attempt)
        assert found is not None
        job, attempt = found
        apply_status(session, job, attempt, BackendStatus(state), T0 + timedelta(seconds=5))


def test_a_row_read_again_unchanged_keeps_its_view_and_its_teams_tuple(
    store: SessionFactory,
) -> None:
    a1, b1 = submit(store, "team-a"), submit(store, "team-b")
    state = fresh(store)
    before = state.groups()
    submit(store, "team-b")
    with store() as session:
        assert state.refresh(session)
    after = state.groups()
    assert after["team-a"] is before["team-a"]  # untouched team: the very tuple
    assert after["team-b"][0] is before["team-b"][0]
    assert {j.id for j in after["team-a"]} >= {a1} and b1 in {j.id for j in after["team-b"]}
    with store() as session:
        assert not state.refresh(session)  # nothing changed: one read of the counter
    assert same(state, fresh(store))


def test_the_reasons_the_controller_writes_are_not_changes(store: SessionFactory) -> None:
    job_id = submit(store, "team-c")
    with store() as session:
        seq = changes.current(session)
    with store.begin() as session:
        queue.write_reasons(session, [([{"code": "x"}], [job_id])], T0)
        queue.record_cycle(session, T0)
    with store() as session:
        assert changes.changed_since(session, seq) == (seq, [])


def test_a_rolled_back_transaction_logs_nothing(store: SessionFactory) -> None:
    with store() as session:
        seq = changes.current(session)
    with pytest.raises(RuntimeError), store.begin() as session:
        jobs.add(session, queued_job("j-rolled-back", team="team-c"))
        session.flush()
        raise RuntimeError("abort")
    with store.begin() as session:  # the next transaction does not inherit its notes
        queue.record_cycle(session, T0)
    with store() as session:
        assert changes.changed_since(session, seq) == (seq, [])


def test_bulk_writes_are_logged(store: SessionFactory) -> None:
    """Statements the ORM does not track: an array's insert, cancels of a whole array."""
    with store() as session:
        seq = changes.current(session)
    rows = [
        {
            column.name: getattr(queued_job(f"arr-{i}", array_id="arr", array_index=i), column.key)
            for column in queued_job("x").__table__.columns
            if column.name != "change_seq"
        }
        for i in range(3)
    ]
    with store.begin() as session:
        jobs.add_many(session, rows)
    with store() as session:
        after_insert, ids = changes.changed_since(session, seq)
    assert ids == ["arr-0", "arr-1", "arr-2"]
    admit(store, "arr-1")
    with store.begin() as session:
        jobs.cancel_array(session, "arr", T0)
    with store() as session:
        _, ids = changes.changed_since(session, after_insert)
    assert ids == ["arr-0", "arr-1", "arr-2"]
    with store.begin() as session:
        changes.prune(session, after_insert)
    with store() as session:
        assert changes.changed_since(session, 0)[1] == ["arr-0", "arr-1", "arr-2"]


ACTIONS = ("submit", "submit", "cancel", "admit", "start", "end", "preempt", "signal", "requeue")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(0, 10**6)), max_size=25))
def test_an_incremental_state_equals_a_loaded_one(
    store: SessionFactory, steps: list[tuple[str, int]]
) -> None:
    state = fresh(store)
    for action, pick in steps:
        with store() as session:
            queued = sorted(state.queued_ids())
            active = sorted(j.id for j in state.running())
        if action == "submit":
            submit(store, f"team-{pick % 3}", priority=pick % 2)
        elif action == "cancel" and queued:
            with store.begin() as session:
                row = jobs.get(session, queued[pick % len(queued)])
                assert row is not None
                jobs.cancel_if_queued(session, row, T0)
        elif action == "admit" and queued:
            admit(store, queued[pick % len(queued)], node=pick % 4)
        elif action in ("start", "end", "requeue") and active:
            state_of = {
                "start": RunState.RUNNING,
                "end": RunState.SUCCEEDED,
                "requeue": RunState.LOST,
            }
            report(store, active[pick % len(active)], state_of[action])
        elif action == "preempt" and active:
            with store.begin() as session:
                queue.mark_victim(session, active[pick % len(active)], "someone", "why", T0)
        elif action == "signal" and active:
            job_id = active[pick % len(active)]
            with store.begin() as session:
                row = jobs.get(session, job_id)
                assert row is not None
                found = jobs.active_attempt(session, job_id, row.attempt)
                assert found is not None
                if pick % 2:
                    queue.mark_cancel_sent(session, found[1].id)  # a bulk UPDATE
                else:
                    row.cancel_requested = True  # an ORM change
        with store() as session:
            state.refresh(session)
        assert same(state, fresh(store)), action
    # Queued jobs keep the attempt number admissions are conditional on.
    for job_id in state.queued_ids():
        with store() as session:
            row = jobs.get(session, job_id)
            assert row is not None and row.status == JobStatus.QUEUED.value
            assert state.attempt_of(job_id) == row.attempt


def test_a_state_loaded_from_an_empty_store_is_empty(tmp_path: Path) -> None:
    engine = make_engine(sqlite_url(tmp_path))
    upgrade(engine)
    state = fresh(session_factory(engine))
    engine.dispose()
    assert state.loaded and state.groups() == {} and state.running() == ()


def test_reasons_are_written_on_queued_jobs_only(store: SessionFactory) -> None:
    waiting, admitted = submit(store, "team-c"), submit(store, "team-c")
    admit(store, admitted)
    reasons = [{"gpu_type": "h100", "code": "quota", "message": "over quota"}]
    with store.begin() as session:
        queue.write_reasons(session, [(reasons, [waiting, admitted])], T0)
    with store() as session:
        assert jobs.get(session, waiting).pending_reasons == reasons  # type: ignore[union-attr]
        assert jobs.get(session, admitted).pending_reasons == []  # type: ignore[union-attr]
