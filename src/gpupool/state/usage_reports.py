"""Reading the usage ledger for reports (C1, C2): sums in SQL, shaping in ``accounting.reports``.

A summary reads whole UTC hours ``[first, last)`` (``accounting.periods.hour_range``):

* :func:`uses`: the rollups summed per team, gpu type, pool and node type (and user or
  priority class when grouped on them), one ``GROUP BY`` per table: ``usage_days`` for the
  whole UTC days of the range, ``usage_hours`` for the hours before and after them (a
  month reads ~30 day rows per key, not ~720 hour rows); both are read from their covering
  report index;
* :func:`capacity`: each pool's capacity in the range and the hours it has none for, and
  :func:`used_in` the use in those hours (normally none: gaps are rare), for idle;
* :func:`open_attempts`: the running attempts (``ended_at IS NULL``, ``ix_usage_ended``),
  whose time since ``accrued_until`` the rollups do not hold yet;
* :func:`gaps`: ``accounting_gaps`` overlapping the range.

The detailed report pages through ``usage`` itself (:func:`attempts`). Functions take the
caller's session and only read.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import UTC, datetime, timedelta

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from gpupool.accounting.reports import (
    Attempt,
    OpenAttempt,
    PoolCapacity,
    Span,
    Use,
    holes,
)
from gpupool.state.models import (
    AccountingGapRow,
    CapacityHourRow,
    UsageDayRow,
    UsageHourRow,
    UsageRow,
)

_KEY = ("team", "gpu_type", "pool", "node_type")  # always grouped: pricing and idle need them
_OPTIONAL = ("user", "priority_class")
_HOUR = timedelta(hours=1)
_DAY = timedelta(days=1)


def uses(session: Session, first: datetime, last: datetime, group_by: Sequence[str]) -> list[Use]:
    """Every team's GPU time per key in the hours ``[first, last)``: the whole UTC days inside
    the range from ``usage_days``, the hours before and after them from ``usage_hours``."""
    names = [*_KEY, *(n for n in _OPTIONAL if n in group_by)]
    day_from = first if first == _floor_day(first) else _floor_day(first) + _DAY
    day_to = _floor_day(last)
    spans: list[tuple[type[UsageHourRow] | type[UsageDayRow], datetime, datetime]]
    if day_from < day_to:
        spans = [
            (UsageHourRow, first, day_from),
            (UsageDayRow, day_from, day_to),
            (UsageHourRow, day_to, last),
        ]
    else:
        spans = [(UsageHourRow, first, last)]
    sums: dict[tuple[object, ...], list[int]] = {}
    for table, start, end in spans:
        if start >= end:
            continue
        at = table.hour if table is UsageHourRow else table.day  # type: ignore[union-attr]
        columns = [getattr(table, n) for n in names]
        query = (
            select(*columns, func.sum(table.gpu_ms), func.sum(table.borrowed_gpu_ms))
            .where(at >= start, at < end)
            .group_by(*columns)
        )
        for row in session.execute(query):
            added = sums.setdefault(tuple(row[: len(names)]), [0, 0])
            added[0] += int(row[-2])
            added[1] += int(row[-1])
    return [
        Use(gpu_ms=ms, borrowed_gpu_ms=borrowed, **dict(zip(names, key, strict=True)))  # type: ignore[arg-type]
        for key, (ms, borrowed) in sums.items()
    ]


def _floor_day(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def capacity(session: Session, first: datetime, last: datetime) -> list[PoolCapacity]:
    """Each pool's capacity in the hours ``[first, last)``, with the spans it has none for.

    One aggregate per pool; a pool whose hours are not one contiguous run (a gap inside the
    range) has its hours read to find the holes."""
    query = (
        select(
            CapacityHourRow.pool,
            func.sum(CapacityHourRow.gpu_ms),
            func.count(),
            func.min(CapacityHourRow.hour),
            func.max(CapacityHourRow.hour),
        )
        .where(CapacityHourRow.hour >= first, CapacityHourRow.hour < last)
        .group_by(CapacityHourRow.pool)
    )
    found = []
    for pool, gpu_ms, count, low, high in session.execute(query).all():
        low, high = _aware(low), _aware(high)
        if count == (high - low) // _HOUR + 1:
            # One run from low to high: the holes are before and after it.
            ends = ((first, low), (high + _HOUR, last))
            spans = tuple((start, end) for start, end in ends if start < end)
        else:
            rows = session.scalars(
                select(CapacityHourRow.hour).where(
                    CapacityHourRow.pool == pool,
                    CapacityHourRow.hour >= first,
                    CapacityHourRow.hour < last,
                )
            )
            spans = holes(first, last, list(rows))
        found.append(PoolCapacity(pool, int(gpu_ms), spans))
    return found


def used_in(
    session: Session, spans: Mapping[str, Sequence[tuple[datetime, datetime]]]
) -> dict[str, int]:
    """GPU-ms used on each pool within its given spans (one statement for all of them)."""
    clauses = [
        and_(UsageHourRow.pool == pool, UsageHourRow.hour >= start, UsageHourRow.hour < end)
        for pool, pool_spans in spans.items()
        for start, end in pool_spans
    ]
    if not clauses:
        return {}
    query = (
        select(UsageHourRow.pool, func.sum(UsageHourRow.gpu_ms))
        .where(or_(*clauses))
        .group_by(UsageHourRow.pool)
    )
    return {pool: int(ms) for pool, ms in session.execute(query)}


def _aware(at: datetime | str) -> datetime:
    # An aggregate's value may come back without the column's type (SQLite: text, no zone);
    # every stored time is UTC.
    if isinstance(at, str):
        at = datetime.fromisoformat(at)
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


def open_attempts(session: Session, last: datetime) -> list[OpenAttempt]:
    """Running attempts accrued to before ``last``: they may have unaccrued time in range."""
    query = select(
        UsageRow.team,
        UsageRow.user,
        UsageRow.gpu_type,
        UsageRow.pool,
        UsageRow.priority_class,
        UsageRow.node_type,
        UsageRow.gpus,
        UsageRow.borrowed,
        UsageRow.accrued_until,
    ).where(UsageRow.ended_at.is_(None), UsageRow.accrued_until < last)
    return [OpenAttempt(*row) for row in session.execute(query)]


def gaps(session: Session, start: datetime, end: datetime) -> list[Span]:
    """The recorded gaps that overlap ``[start, end)``, as stored (unclipped)."""
    query = (
        select(AccountingGapRow.start, AccountingGapRow.end, AccountingGapRow.reason)
        .where(AccountingGapRow.start < end, AccountingGapRow.end > start)
        .order_by(AccountingGapRow.start)
    )
    return [Span(*row) for row in session.execute(query)]


def attempts(
    session: Session,
    first: datetime,
    last: datetime,
    *,
    teams: Collection[str] | None,
    after: int | None,
    limit: int,
) -> list[Attempt]:
    """At most ``limit`` attempts that held GPUs in ``[first, last)``, by attempt id after
    ``after``; ``teams`` limits them (None: every team)."""
    query = select(
        UsageRow.attempt_id,
        UsageRow.job_id,
        UsageRow.job_name,
        UsageRow.team,
        UsageRow.user,
        UsageRow.gpu_type,
        UsageRow.pool,
        UsageRow.backend,
        UsageRow.priority_class,
        UsageRow.node_type,
        UsageRow.gpus,
        UsageRow.borrowed,
        UsageRow.started_at,
        UsageRow.ended_at,
        UsageRow.outcome,
    ).where(
        UsageRow.started_at < last,
        or_(UsageRow.ended_at.is_(None), UsageRow.ended_at > first),
    )
    if teams is not None:
        query = query.where(UsageRow.team.in_(sorted(teams)))
    if after is not None:
        query = query.where(UsageRow.attempt_id > after)
    query = query.order_by(UsageRow.attempt_id).limit(limit)
    return [Attempt(*row) for row in session.execute(query)]
