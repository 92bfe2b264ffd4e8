"""Group commit on SQLite and PostgreSQL: concurrent writes share transactions, each write
lands exactly once, and a failing write fails only its own caller."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.exc import IntegrityError

from gpupool.state.db import Session, session_factory
from gpupool.state.group_commit import GroupCommit
from gpupool.state.models import JobRow
from support.rows import queued_job

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class CountingGroup(GroupCommit):
    """Counts the transactions that committed a group of more than one write."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.grouped = 0

    def _commit(self, group: list) -> None:  # type: ignore[type-arg]
        if len(group) > 1:
            self.grouped += 1
        super()._commit(group)


def adder(job_id: str, key: str | None = None) -> object:
    def write(session: Session) -> None:
        session.add(queued_job(job_id, submitted_at=T0, idempotency_key=key))

    return write


def run_all(group: GroupCommit, writes: list[object]) -> list[BaseException | None]:
    """Each write from its own thread, released at once; each thread's outcome."""
    outcomes: list[BaseException | None] = [None] * len(writes)
    start = threading.Barrier(len(writes))

    def call(n: int) -> None:
        start.wait()
        try:
            group.run(writes[n])  # type: ignore[arg-type]
        except BaseException as exc:
            outcomes[n] = exc

    threads = [threading.Thread(target=call, args=(n,)) for n in range(len(writes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return outcomes


def stored(engine: Engine) -> list[str]:
    with session_factory(engine)() as session:
        return sorted(session.scalars(select(JobRow.id)))


def test_writes_queued_behind_a_transaction_are_committed_together(engine: Engine) -> None:
    group = CountingGroup(session_factory(engine))
    inside, release = threading.Event(), threading.Event()

    def slow(session: Session) -> None:
        session.add(queued_job("j-slow", submitted_at=T0))
        inside.set()
        release.wait(timeout=30)  # holds the writer while the others queue

    first = threading.Thread(target=group.run, args=(slow,))
    first.start()
    assert inside.wait(timeout=30)
    ids = [f"j-{n:03d}" for n in range(40)]
    others = threading.Thread(target=run_all, args=(group, [adder(i) for i in ids]))
    others.start()
    give_up = time.monotonic() + 30
    while len(group._queue) < len(ids) and time.monotonic() < give_up:
        time.sleep(0.01)
    release.set()
    first.join(timeout=60)
    others.join(timeout=60)
    assert stored(engine) == sorted(["j-slow", *ids])
    assert group.grouped == 1  # the 40 that queued went in one transaction


def test_concurrent_writes_all_land_once(engine: Engine) -> None:
    ids = [f"j-{n:03d}" for n in range(60)]
    outcomes = run_all(GroupCommit(session_factory(engine)), [adder(i) for i in ids])
    assert outcomes == [None] * len(ids)
    assert stored(engine) == ids


def test_a_failing_write_fails_only_its_caller(engine: Engine) -> None:
    group = GroupCommit(session_factory(engine))
    group.run(adder("j-first", key="k"))  # the key is taken before the burst
    writes = [adder(f"j-{n:02d}") for n in range(20)]
    writes[7] = adder("j-dup", key="k")  # (alice, k) again: violates the unique key
    outcomes = run_all(group, writes)
    assert [n for n, o in enumerate(outcomes) if o is not None] == [7]
    assert isinstance(outcomes[7], IntegrityError)
    assert stored(engine) == sorted(["j-first", *(f"j-{n:02d}" for n in range(20) if n != 7)])


def test_a_write_alone_runs_at_once_in_its_own_transaction(engine: Engine) -> None:
    group = CountingGroup(session_factory(engine))
    group.run(adder("j-alone"))
    assert stored(engine) == ["j-alone"]
    assert group.grouped == 0


def test_an_error_before_the_store_reaches_its_caller(engine: Engine) -> None:
    def broken(session: Session) -> None:
        raise ValueError("bad write")

    group = GroupCommit(session_factory(engine))
    with pytest.raises(ValueError, match="bad write"):
        group.run(broken)
    group.run(adder("j-after"))  # the group is free again
    assert stored(engine) == ["j-after"]
