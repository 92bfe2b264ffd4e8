"""Budgets (C3): the period a budget covers at an instant, and how much of it a team used.

Pure: callers hand in the instant and the usage; nothing here reads a clock or the store.

Periods are those of the usage reports (``accounting.periods``), cut in ``accounting.timezone``:
a month starts on its first day at midnight there, a week on ``accounting.week_start``, a
quarter every three months from ``accounting.fiscal_year_start`` (named for people as
``Q1 FY2028``, the fiscal year by the calendar year it ends in, as reports name it); a custom
period runs from its ``start`` day to the end of its ``end`` day. A :class:`Period` holds its
bounds as aware UTC datetimes, ``end`` excluded.

Usage is counted from the ledger's hourly rollups, whose hours are UTC hours: in a zone whose
offset is not a whole number of hours, the hour a period starts in counts in the period before
(an error of at most one hour of use at each end of a period).

:class:`BudgetState` is the one answer to "how does this budget stand": used and limit in the
budget's unit (GPU-hours, or money in ``accounting.currency``), the thresholds reached, and
whether the budget is used up (``used >= limit``), from which point its enforcement applies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from gpupool.accounting.periods import bounds, local_date, local_midnight
from gpupool.accounting.pricing import MS_PER_HOUR, cost, price_per_gpu_hour
from gpupool.spec.models import Accounting, Budget, ClusterConfig

GPU_HOURS = "GPU-h"

# (team, gpu type, pool, node type) -> GPU-milliseconds: what ``state.budgets`` sums.
UsageKey = tuple[str, str, str, str]


@dataclass(frozen=True, slots=True)
class Period:
    """``[start, end)`` in UTC; ``label`` names it for people ("June 2027", "Q3 FY2027")."""

    start: datetime
    end: datetime
    label: str
    # The first day after the period, in the accounting zone: when enforcement ends by itself.
    next_day: date

    def contains(self, at: datetime) -> bool:
        return self.start <= at < self.end


def month_at(accounting: Accounting, at: datetime) -> Period:
    """The calendar month that contains ``at``, in the accounting zone."""
    period = period_at(Budget(name="month", gpu_hours=1), accounting, at)
    assert period is not None  # only custom periods can miss
    return period


def period_at(budget: Budget, accounting: Accounting, at: datetime) -> Period | None:
    """The period of ``budget`` that contains ``at``; None for a custom period ``at`` is outside
    of (the budget is then not in force)."""
    zone = ZoneInfo(accounting.timezone)
    if budget.period == "custom":
        if budget.start is None or budget.end is None:
            return None
        after = budget.end + timedelta(days=1)
        period = Period(
            local_midnight(budget.start, zone),
            local_midnight(after, zone),
            f"{budget.start.isoformat()} to {budget.end.isoformat()}",
            after,
        )
        return period if period.contains(at) else None
    first, after, report_label = bounds(budget.period, local_date(at, accounting), accounting)
    if budget.period == "week":
        label = f"the week of {first.strftime('%b')} {first.day}, {first.year}"
    elif budget.period == "quarter":
        # The report's name (FY2028-Q1: fiscal years are named by the year they end in), read
        # the other way round for people: Q1 FY2028.
        fiscal_year, quarter = report_label.split("-")
        label = f"{quarter} {fiscal_year}"
    else:
        label = f"{first.strftime('%B')} {first.year}"
    return Period(local_midnight(first, zone), local_midnight(after, zone), label, after)


def day_text(day: date) -> str:
    """``July 1`` (the year only when it is not the period's own: ``January 1, 2028``)."""
    return f"{day.strftime('%B')} {day.day}"


@dataclass(frozen=True, slots=True)
class BudgetState:
    """How one budget of one team stands in its current period.

    Invariant: ``reached`` lists, in increasing order, the budget's thresholds (percent) that
    ``used`` has reached; ``over`` is ``used >= limit``, the point where enforcement applies.
    """

    team: str
    budget: Budget
    period: Period
    unit: str  # GPU_HOURS or the currency code
    used: float
    limit: float

    @property
    def name(self) -> str:
        return self.budget.name

    @property
    def percent(self) -> float:
        return 100.0 * self.used / self.limit

    @property
    def remaining(self) -> float:
        return max(0.0, self.limit - self.used)

    @property
    def over(self) -> bool:
        return self.used >= self.limit

    @property
    def reached(self) -> tuple[float, ...]:
        return tuple(sorted(t for t in set(self.budget.thresholds) if self.percent >= t))

    @property
    def enforced(self) -> bool:
        """Over the limit with an enforcement that changes scheduling."""
        return self.over and self.budget.enforcement != "alert"

    @property
    def status(self) -> str:
        """``ok``, ``warning`` (a threshold below 100 % reached) or ``over``."""
        if self.over:
            return "over"
        return "warning" if self.reached else "ok"


def number_text(value: float, unit: str) -> str:
    """``1,012`` GPU-hours (one decimal below 10), ``1,012.50`` of a currency."""
    if unit == GPU_HOURS:
        return f"{value:,.0f}" if value >= 10 else f"{value:,.1f}"
    return f"{value:,.2f}"


def amount_text(value: float, unit: str) -> str:
    """``1,012 GPU-h`` / ``1,012.50 USD``."""
    return f"{number_text(value, unit)} {unit}"


def evaluate(
    config: ClusterConfig,
    team: str,
    budget: Budget,
    period: Period,
    usage: Mapping[UsageKey, int],
) -> BudgetState:
    """``budget``'s state from ``usage`` in ``period`` (GPU-ms per team, gpu type, pool and node
    type). Money budgets price each pool's GPU-hours (:mod:`gpupool.accounting.pricing`)."""
    used = 0.0
    for (owner, gpu_type, pool, node_type), gpu_ms in usage.items():
        if owner != team or (budget.gpu_type is not None and gpu_type != budget.gpu_type):
            continue
        if budget.amount is None:
            used += gpu_ms / MS_PER_HOUR
        else:
            price = price_per_gpu_hour(config, gpu_type=gpu_type, pool=pool, node_type=node_type)
            used += cost(gpu_ms, price)
    if budget.amount is not None:
        return BudgetState(team, budget, period, config.accounting.currency, used, budget.amount)
    assert budget.gpu_hours is not None  # a valid budget has exactly one limit
    return BudgetState(team, budget, period, GPU_HOURS, used, budget.gpu_hours)


def in_force(config: ClusterConfig, at: datetime) -> list[tuple[str, Budget, Period]]:
    """Every team's budgets whose period contains ``at``, by team then budget order."""
    found = []
    for name in sorted(config.teams):
        for budget in config.teams[name].budgets:
            period = period_at(budget, config.accounting, at)
            if period is not None:
                found.append((name, budget, period))
    return found
