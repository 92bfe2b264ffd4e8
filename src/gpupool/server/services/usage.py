"""Usage and cost reports as the API serves them (C1, C2): the range, who sees what, shaping.

Who sees what: platform admins and auditors read every team, including the ``(idle)`` rows
of pools; anyone else reads only the teams they have a role in, and of idle capacity only
their teams' shares. Asking for a ``team`` that the configuration does not have is 404, as
``/v1/teams/{team}`` answers; one the caller may not read is 403.

The range is ``from``/``to`` (``to`` defaults to now; a time without a zone is read in
``accounting.timezone``), or the ``period`` holding the local date ``at`` (default: the month
holding today). With ``from``/``to`` a ``period`` cuts the range into such periods. A range
may span at most five years.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, cast
from zoneinfo import ZoneInfo

from gpupool.accounting import periods
from gpupool.accounting.periods import PERIOD_KINDS, Period, PeriodKind
from gpupool.accounting.pricing import MS_PER_HOUR
from gpupool.accounting.reports import (
    DEFAULT_GROUP_BY,
    GROUP_FIELDS,
    IDLE,
    AttemptLine,
    Summary,
    SummaryRow,
    attempt_line,
    idle_per_pool,
    missing_spans,
    parse_group_by,
    summarize,
    unaccrued,
    use_by_pool_team,
)
from gpupool.auth.principal import Principal
from gpupool.controller.clock import Clock
from gpupool.core.errors import Forbidden, InvalidRequest, NotFound
from gpupool.server.usage_schemas import (
    CostAttemptOut,
    CostAttempts,
    CostRowOut,
    CostSummary,
    MissingOut,
    UsageAttemptOut,
    UsageAttempts,
    UsageRowOut,
    UsageSummary,
)
from gpupool.spec.models import ClusterConfig
from gpupool.state import usage_reports
from gpupool.state.db import SessionFactory

MAX_ATTEMPTS_PAGE = 10_000
YEARS = (1970, 9000)


@dataclass(frozen=True)
class ReportQuery:
    """A report's parameters as the request gave them (strings: parsed here, errors named)."""

    team: str | None = None
    start: str | None = None  # the `from` parameter
    end: str | None = None  # the `to` parameter
    period: str | None = None
    at: str | None = None
    group_by: str | None = None


def _invalid(field: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"{field}: {message}", [{"field": field, "message": message}])


def _time(field: str, text: str, zone: ZoneInfo) -> datetime:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise _invalid(
            field,
            f"{text!r} is not a date or time; use ISO 8601, e.g. 2026-12-01 or "
            "2026-12-01T08:00:00Z",
        ) from None
    _check_year(field, parsed.year)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=zone)


def _check_year(field: str, year: int) -> None:
    # Far from the ledger's years a period's end or a zone's offset would leave the calendar.
    if not YEARS[0] <= year <= YEARS[1]:
        raise _invalid(field, f"year {year} is outside {YEARS[0]}-{YEARS[1]}")


def resolve_range(config: ClusterConfig, query: ReportQuery, now: datetime) -> list[Period]:
    """The periods a report covers, in order; ``InvalidRequest`` naming the bad field."""
    accounting = config.accounting
    zone = ZoneInfo(accounting.timezone)
    if query.period is not None and query.period not in PERIOD_KINDS:
        raise _invalid(
            "period", f"unknown period {query.period!r}; use one of {', '.join(PERIOD_KINDS)}"
        )
    kind = cast(PeriodKind | None, query.period)
    if query.start is None and query.end is None:
        try:
            day = date.fromisoformat(query.at) if query.at else periods.local_date(now, accounting)
        except ValueError:
            raise _invalid("at", f"{query.at!r} is not a date; use YYYY-MM-DD") from None
        _check_year("at", day.year)
        return [periods.period_of(kind or "month", day, accounting)]
    if query.at is not None:
        raise _invalid("at", "give either at (with period) or from/to, not both")
    if query.start is None:
        raise _invalid("from", "to needs a from: give the start of the range")
    start = _time("from", query.start, zone)
    end = _time("to", query.end, zone) if query.end is not None else now
    if start > end:
        raise _invalid("from", f"from ({start.isoformat()}) is after to ({end.isoformat()})")
    if end - start > periods.MAX_RANGE:
        raise _invalid("to", "the range spans more than 5 years; ask for at most 5 at a time")
    whole = periods.custom(start, end)
    # An empty range is one empty period, so the report still says which range it read.
    return (periods.split(whole, kind, accounting) if kind is not None else []) or [whole]


def _hours(ms: float) -> float:
    return ms / MS_PER_HOUR


class UsageService:
    def __init__(
        self, sessions: SessionFactory, config: Callable[[], ClusterConfig], clock: Clock
    ) -> None:
        self._sessions = sessions
        self._config = config
        self._clock = clock

    def _teams(
        self, principal: Principal, config: ClusterConfig, team: str | None
    ) -> frozenset[str] | None:
        """The teams the report shows (None: every team and the idle rows)."""
        if team is not None:
            if team not in config.teams:
                raise NotFound(f"no team named {team!r}")
            if not principal.reads_usage_of(team):
                raise Forbidden(f"user {principal.user!r} may not read the usage of team {team!r}")
            return frozenset({team})
        if principal.reads_all_usage:
            return None
        return frozenset(principal.readable_teams(sorted(config.teams)))

    def summary(self, principal: Principal, query: ReportQuery) -> _Built:
        """The summary rows of every period of the range, and the gaps in it."""
        config = self._config()
        try:
            group_by = parse_group_by(query.group_by)
        except ValueError as exc:
            raise _invalid("group_by", str(exc)) from None
        teams = self._teams(principal, config, query.team)
        now = self._clock.now()
        ranges = resolve_range(config, query, now)
        start, end = ranges[0].start, ranges[-1].end
        summary = Summary(group_by)
        with self._sessions() as session:
            running = usage_reports.open_attempts(session, periods.ceil_hour(end))
            for period in ranges:
                first, last = periods.hour_range(period)
                uses = usage_reports.uses(session, first, last, group_by)
                pools = usage_reports.capacity(session, first, last)
                # Rollups are never ahead of now: holes after it hold no use to subtract.
                past = {p.pool: [h for h in p.holes if h[0] <= now] for p in pools}
                used_in_holes = usage_reports.used_in(session, past)
                used = {pool: sum(t.values()) for pool, t in use_by_pool_team(uses).items()}
                late_uses, late_hours = unaccrued(running, first, last, now)
                uses += late_uses
                idle = idle_per_pool(pools, used, used_in_holes, late_hours)
                summary.rows += summarize(
                    config, period, group_by, uses, idle, use_by_pool_team(uses), teams=teams
                )
            gaps = usage_reports.gaps(session, start, end)
        summary.missing = missing_spans(gaps, start, end)
        return _Built(config, now, start, end, summary)

    def usage(self, principal: Principal, query: ReportQuery) -> UsageSummary:
        built = self.summary(principal, query)
        return UsageSummary(
            **built.header(),
            group_by=list(built.summary.group_by),
            idle_cost=built.config.accounting.idle_cost,
            rows=[UsageRowOut(**_row_fields(r)) for r in built.summary.rows],
        )

    def costs(self, principal: Principal, query: ReportQuery) -> CostSummary:
        built = self.summary(principal, query)
        return CostSummary(
            **built.header(),
            group_by=list(built.summary.group_by),
            idle_cost=built.config.accounting.idle_cost,
            currency=built.config.accounting.currency,
            rows=[
                CostRowOut(
                    **_row_fields(r),
                    allocated_cost=_money(r.allocated_cost),
                    borrowed_cost=_money(r.borrowed_cost),
                    idle_cost=_money(r.idle_cost),
                    total_cost=_money(r.total_cost),
                    unpriced=r.unpriced,
                )
                for r in built.summary.rows
            ],
        )

    def attempts(
        self, principal: Principal, query: ReportQuery, *, limit: int, cursor: str | None
    ) -> tuple[_Built, list[AttemptLine], str | None]:
        """One page of the detailed report: attempts that held GPUs in the range."""
        config = self._config()
        teams = self._teams(principal, config, query.team)
        now = self._clock.now()
        ranges = resolve_range(config, query, now)
        start, end = ranges[0].start, ranges[-1].end
        first, last = periods.hour_range(periods.custom(start, end))
        after = _cursor(cursor)
        limit = max(1, min(limit, MAX_ATTEMPTS_PAGE))
        with self._sessions() as session:
            rows = usage_reports.attempts(
                session, first, last, teams=teams, after=after, limit=limit + 1
            )
            gaps = usage_reports.gaps(session, start, end)
        more = len(rows) > limit
        rows = rows[:limit]
        lines = [attempt_line(config, a, first, last, now) for a in rows]
        summary = Summary(DEFAULT_GROUP_BY, missing=missing_spans(gaps, start, end))
        next_cursor = str(rows[-1].attempt_id) if more else None
        return _Built(config, now, start, end, summary), lines, next_cursor

    def usage_attempts(
        self, principal: Principal, query: ReportQuery, *, limit: int, cursor: str | None
    ) -> UsageAttempts:
        built, lines, next_cursor = self.attempts(principal, query, limit=limit, cursor=cursor)
        return UsageAttempts(
            **built.header(),
            items=[UsageAttemptOut(**_line_fields(x)) for x in lines],
            next_cursor=next_cursor,
        )

    def cost_attempts(
        self, principal: Principal, query: ReportQuery, *, limit: int, cursor: str | None
    ) -> CostAttempts:
        built, lines, next_cursor = self.attempts(principal, query, limit=limit, cursor=cursor)
        return CostAttempts(
            **built.header(),
            currency=built.config.accounting.currency,
            items=[
                CostAttemptOut(
                    **_line_fields(x),
                    allocated_cost=_money(x.allocated_cost),
                    borrowed_cost=_money(x.borrowed_cost),
                    total_cost=_money(x.total_cost),
                    unpriced=x.unpriced,
                )
                for x in lines
            ],
            next_cursor=next_cursor,
        )


@dataclass(frozen=True)
class _Built:
    config: ClusterConfig
    now: datetime
    start: datetime
    end: datetime
    summary: Summary

    def header(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "timezone": self.config.accounting.timezone,
            "generated_at": self.now,
            "missing": [
                MissingOut(start=s.start, end=s.end, reason=s.reason) for s in self.summary.missing
            ],
        }


def _cursor(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isdigit():
        raise _invalid("cursor", "not a cursor of this report; pass next_cursor as given")
    return int(text)


def _money(amount: float) -> float:
    # Sub-cent precision survives; float noise past it does not.
    return round(amount, 6)


def _row_fields(row: SummaryRow) -> dict[str, Any]:
    fields: dict[str, Any] = {f: row.group.get(f) for f in GROUP_FIELDS}
    if row.pool is not None:  # an (idle) row says so whatever the grouping
        fields.update(pool=row.pool, team=IDLE)
    return {
        **fields,
        "period": row.period.label,
        "period_start": row.period.start,
        "period_end": row.period.end,
        "allocated_gpu_hours": _hours(row.allocated_gpu_ms),
        "borrowed_gpu_hours": _hours(row.borrowed_gpu_ms),
        "idle_gpu_hours": _hours(row.idle_gpu_ms),
    }


def _line_fields(line: AttemptLine) -> dict[str, Any]:
    a = line.attempt
    return {
        **{name: getattr(a, name) for name in UsageAttemptOut.model_fields if hasattr(a, name)},
        "allocated_gpu_hours": _hours(line.allocated_gpu_ms),
        "borrowed_gpu_hours": _hours(line.borrowed_gpu_ms),
    }
