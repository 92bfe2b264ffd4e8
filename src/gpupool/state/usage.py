"""The usage ledger's writes (C1): who used which GPUs for how long, counted exactly once.

One ``usage`` row per attempt that ran (:func:`open_attempt` when it is first seen running),
kept after its job is gone; ``usage_hours`` rolls the rows up per UTC hour, team, user, gpu
type, pool, priority class and node type; ``capacity_hours`` holds each pool's GPUs per hour
(idle = capacity - used); ``accounting_gaps`` the spans no controller was accruing.

Invariants (times in whole milliseconds, ``gpupool.accounting.hours``):

* A row's ``gpu_ms`` is ``gpus x (ms(accrued_until) - ms(started_at))`` and its
  ``borrowed_gpu_ms`` the same with ``borrowed``: ``gpu_ms`` counts all the attempt's GPUs,
  ``borrowed_gpu_ms`` the part above its team's nominal at admission (within quota is the
  difference). A closed row has ``accrued_until == ended_at`` and an ``outcome``.
* ``usage_days`` holds the same sums per UTC day, written in the same statements as the
  hours: per key and day, it equals the sum of that day's hours.
* ``usage_hours`` always sums, per key, to the rows' totals: :func:`accrue` and
  :func:`close_attempt` add ``[accrued_until, until)`` to the hours and to the row, and move
  ``accrued_until`` to ``until``, in the caller's one transaction. A crash before its commit
  leaves neither; after it, both: no span is counted twice or lost. The rows being moved are
  locked first (``FOR UPDATE`` on PostgreSQL; SQLite has one writer at a time), so a close
  and an accrual of one row never interleave.
* Capacity is accrued from ``accounting_state.accrued_until`` to now by
  :func:`accrue_capacity`; when that is older than the caller's threshold (no controller was
  accruing: all stopped, or a takeover came late), the span becomes an ``accounting_gaps``
  row instead and gets no capacity, so reports show it as missing, never as idle. Attempts
  running meanwhile still count their real time: they held their GPUs.

Reading it (reports, budgets): the rollups lag by up to one accrual interval. At a time ``T``
add, for each open row (``ended_at IS NULL``), ``hours.unaccrued_ms(gpus, accrued_until,
T)``, split by :func:`gpupool.accounting.hours.split_hours` for hourly views.

Like every repository here, these functions take the caller's session and never commit.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import BigInteger, Table, bindparam, func, literal, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from gpupool.accounting.hours import epoch_ms, split_hours
from gpupool.core.jobs import JobStatus
from gpupool.state.models import (
    AccountingGapRow,
    AccountingStateRow,
    AttemptRow,
    CapacityHourRow,
    JobRow,
    UsageDayRow,
    UsageHourRow,
    UsageRow,
    UTCDateTime,
)

# How an attempt ended, as its final status says (an attempt's status names these the same).
OUTCOMES = frozenset({"succeeded", "failed", "cancelled", "preempted", "lost", "evicted"})
GAP_REASON = "no controller was accruing"

_USAGE: Table = UsageRow.__table__  # type: ignore[assignment]
_HOURS: Table = UsageHourRow.__table__  # type: ignore[assignment]
_DAYS: Table = UsageDayRow.__table__  # type: ignore[assignment]
_CAPACITY: Table = CapacityHourRow.__table__  # type: ignore[assignment]
_HOUR_KEY = ("hour", "team", "user", "gpu_type", "pool", "priority_class", "node_type")
_DAY_KEY = ("day", *_HOUR_KEY[1:])
# What accrual reads of an open row: the key of its hours and what it adds to them.
_OPEN_COLUMNS = (
    _USAGE.c.attempt_id,
    *(_USAGE.c[name] for name in _HOUR_KEY[1:]),
    _USAGE.c.gpus,
    _USAGE.c.borrowed,
    _USAGE.c.accrued_until,
)


@dataclass(frozen=True)
class PoolGpus:
    """What one pool contributes to ``capacity_hours``: all its GPUs, nodes x per node."""

    pool: str
    gpu_type: str
    node_type: str
    gpus: int


@dataclass(frozen=True)
class Gap:
    """A span no controller accrued: recorded in ``accounting_gaps``, without capacity."""

    start: datetime
    end: datetime


def outcome_of(status: str) -> str:
    """The ledger's outcome of an attempt that ended with ``status``."""
    if status not in OUTCOMES:
        raise ValueError(f"attempt status {status!r} is not an end; use one of {sorted(OUTCOMES)}")
    return status


# -- attempts -------------------------------------------------------------------------------


def open_attempt(
    session: Session,
    *,
    attempt_id: int,
    job_id: str,
    job_name: str,
    team: str,
    user: str,
    gpu_type: str,
    pool: str,
    backend: str,
    priority_class: str,
    node_type: str,
    gpus: int,
    borrowed: int,
    at: datetime,
) -> bool:
    """Start counting the attempt's GPUs at ``at``; False when it has a row already (an
    attempt is opened once: a second open changes nothing)."""
    statement = (
        _insert(session, _USAGE)
        .values(
            attempt_id=attempt_id,
            job_id=job_id,
            job_name=job_name,
            team=team,
            user=user,
            gpu_type=gpu_type,
            pool=pool,
            backend=backend,
            priority_class=priority_class,
            node_type=node_type,
            gpus=gpus,
            borrowed=min(borrowed, gpus),
            started_at=at,
            ended_at=None,
            accrued_until=at,
            gpu_ms=0,
            borrowed_gpu_ms=0,
            outcome=None,
        )
        .on_conflict_do_nothing(index_elements=["attempt_id"])
        .returning(_USAGE.c.attempt_id)
    )
    return session.execute(statement).scalar() is not None


def running_without_row(session: Session) -> list[tuple[JobRow, AttemptRow]]:
    """Running attempts the ledger has no row of (they started before it was kept), with
    their jobs: one anti-join, read when a controller's term starts."""
    return list(
        session.execute(
            select(JobRow, AttemptRow)
            .join(AttemptRow, AttemptRow.job_id == JobRow.id)
            .where(
                AttemptRow.status == JobStatus.RUNNING.value,
                ~select(_USAGE.c.attempt_id).where(_USAGE.c.attempt_id == AttemptRow.id).exists(),
            )
        )
        .tuples()
        .all()
    )


def close_attempt(session: Session, attempt_id: int, at: datetime, outcome: str) -> bool:
    """Count the attempt up to ``at`` and record how it ended; False when it has no open row.

    A row already accrued past ``at`` (another controller's clock ran ahead) ends where it
    was accrued to, so its total still equals its span."""
    outcome = outcome_of(outcome)
    row = session.execute(
        select(*_OPEN_COLUMNS)
        .where(_USAGE.c.attempt_id == attempt_id, _USAGE.c.ended_at.is_(None))
        .with_for_update()
    ).one_or_none()
    if row is None:
        return False
    end = max(at, row.accrued_until)
    _add_hours(session, _hours_of([row], end))
    ms = literal(epoch_ms(end) - epoch_ms(row.accrued_until), BigInteger())  # int4 x int4 overflows
    session.execute(
        update(_USAGE)
        .where(_USAGE.c.attempt_id == attempt_id)
        .values(
            gpu_ms=_USAGE.c.gpu_ms + _USAGE.c.gpus * ms,
            borrowed_gpu_ms=_USAGE.c.borrowed_gpu_ms + _USAGE.c.borrowed * ms,
            accrued_until=end,
            ended_at=end,
            outcome=outcome,
        )
    )
    return True


def accrue(session: Session, now: datetime) -> int:
    """Add every open row's time from its ``accrued_until`` to ``now`` to the hours and to
    the row; how many rows moved. Three statements however many rows: the rows locked and
    summed per hour key and ``accrued_until``, one upsert of the hours, and one update
    executed per distinct ``accrued_until`` (all rows accrued together share one; only
    those opened since the last accrual differ)."""
    moving = select(*_OPEN_COLUMNS[1:]).where(
        _USAGE.c.ended_at.is_(None), _USAGE.c.accrued_until < now
    )
    if session.get_bind().dialect.name == "postgresql":  # SQLite has one writer at a time
        moving = moving.with_for_update()  # summed are exactly the rows locked
    rows = moving.cte("moving")
    key = [rows.c[name] for name in _HOUR_KEY[1:]]
    groups = session.execute(
        select(
            *key,
            rows.c.accrued_until,
            func.sum(rows.c.gpus).label("gpus"),
            func.sum(rows.c.borrowed).label("borrowed"),
            func.count().label("rows"),
        ).group_by(*key, rows.c.accrued_until)
    ).all()
    if not groups:
        return 0
    _add_hours(session, _hours_of(groups, now))
    since = sorted({group.accrued_until for group in groups})
    ms = bindparam("span_ms", type_=BigInteger())
    session.execute(
        update(_USAGE)
        .where(
            _USAGE.c.ended_at.is_(None),
            _USAGE.c.accrued_until == bindparam("since", type_=UTCDateTime()),
        )
        .values(
            gpu_ms=_USAGE.c.gpu_ms + _USAGE.c.gpus * ms,
            borrowed_gpu_ms=_USAGE.c.borrowed_gpu_ms + _USAGE.c.borrowed * ms,
            accrued_until=bindparam("until", type_=UTCDateTime()),
        ),
        [{"since": t, "span_ms": epoch_ms(now) - epoch_ms(t), "until": now} for t in since],
    )
    return sum(group.rows for group in groups)


def _hours_of(rows: Iterable[Any], until: datetime) -> dict[tuple[Any, ...], list[int]]:
    """Per hour key, ``[gpu_ms, borrowed_gpu_ms]`` that ``rows`` (usage rows, or their sums
    per key and ``accrued_until``) add up to ``until``; each distinct start is cut once."""
    cuts: dict[datetime, list[tuple[datetime, int]]] = {}
    hours: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        key = (row.team, row.user, row.gpu_type, row.pool, row.priority_class, row.node_type)
        pieces = cuts.get(row.accrued_until)
        if pieces is None:
            pieces = cuts[row.accrued_until] = split_hours(row.accrued_until, until)
        for hour, ms in pieces:
            added = hours[(hour, *key)]
            added[0] += row.gpus * ms
            added[1] += row.borrowed * ms
    return hours


def _add_hours(session: Session, hours: dict[tuple[Any, ...], list[int]]) -> None:
    """Add to the hourly rollups and, in the same transaction, to the daily ones."""
    rows = [
        {**dict(zip(_HOUR_KEY, key, strict=True)), "gpu_ms": ms, "borrowed_gpu_ms": borrowed}
        for key, (ms, borrowed) in hours.items()
        if ms or borrowed
    ]
    _upsert_adding(session, _HOURS, _HOUR_KEY, rows, ("gpu_ms", "borrowed_gpu_ms"))
    days: dict[tuple[Any, ...], list[int]] = defaultdict(lambda: [0, 0])
    for (hour, *key), (ms, borrowed) in hours.items():
        added = days[(day_of(hour), *key)]
        added[0] += ms
        added[1] += borrowed
    day_rows = [
        {**dict(zip(_DAY_KEY, key, strict=True)), "gpu_ms": ms, "borrowed_gpu_ms": borrowed}
        for key, (ms, borrowed) in days.items()
        if ms or borrowed
    ]
    _upsert_adding(session, _DAYS, _DAY_KEY, day_rows, ("gpu_ms", "borrowed_gpu_ms"))


def day_of(at: datetime) -> datetime:
    """The UTC day (its 00:00) that holds ``at``."""
    return at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


# -- capacity and gaps ----------------------------------------------------------------------


def accrue_capacity(
    session: Session, now: datetime, pools: Sequence[PoolGpus], gap_after: timedelta
) -> Gap | None:
    """Add each pool's GPUs from ``accounting_state.accrued_until`` to ``now`` to
    ``capacity_hours``, and move that mark to ``now``. A mark older than ``gap_after`` means
    nobody accrued meanwhile: the span is recorded as a gap (returned) and gets no capacity.
    The first accrual of a store only sets the mark."""
    state = session.get(AccountingStateRow, 1, with_for_update=True)
    if state is None:  # the migration makes the row; a store built otherwise gets it here
        state = AccountingStateRow(id=1, accrued_until=None)
        session.add(state)
    since = state.accrued_until
    if since is not None and since >= now:
        return None  # another controller's clock ran ahead: wait for ours to pass it
    state.accrued_until = now
    if since is None:
        return None
    if now - since > gap_after:
        session.add(AccountingGapRow(start=since, end=now, reason=GAP_REASON))
        return Gap(since, now)
    rows = [
        {
            "hour": hour,
            "pool": pool.pool,
            "gpu_type": pool.gpu_type,
            "node_type": pool.node_type,
            "gpu_ms": pool.gpus * ms,
        }
        for hour, ms in split_hours(since, now)
        for pool in pools
        if pool.gpus > 0
    ]
    _upsert_adding(
        session, _CAPACITY, ("hour", "pool"), rows, ("gpu_ms",), ("gpu_type", "node_type")
    )
    return None


def accrued_until(session: Session) -> datetime | None:
    """Up to when capacity was accrued (None: never)."""
    state = session.get(AccountingStateRow, 1)
    return None if state is None else state.accrued_until


# -- upserts --------------------------------------------------------------------------------


def _insert(session: Session, table: Table) -> Any:
    """The dialect's INSERT, which has ``ON CONFLICT`` on PostgreSQL and SQLite alike."""
    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)


def _upsert_adding(
    session: Session,
    table: Table,
    key: Sequence[str],
    rows: Sequence[dict[str, Any]],
    add: Sequence[str],
    replace: Sequence[str] = (),
) -> None:
    """Insert ``rows`` (distinct keys); where a key exists, add the ``add`` columns to it
    and overwrite the ``replace`` ones. One statement, compiled once and cached, executed
    for all rows (SQLAlchemy sends them as multi-row VALUES pages where the driver can)."""
    if not rows:
        return
    statement = _insert(session, table)
    changes = {name: table.c[name] + statement.excluded[name] for name in add}
    changes.update({name: statement.excluded[name] for name in replace})
    session.execute(
        statement.on_conflict_do_update(index_elements=list(key), set_=changes), list(rows)
    )
