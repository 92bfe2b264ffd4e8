"""Report periods (C2): days, weeks, months, fiscal quarters and years in the configured zone.

A period is a half-open span ``[start, end)`` of aware UTC times whose local boundaries are
midnights in ``accounting.timezone``: a day, a week starting on ``accounting.week_start``, a
calendar month, a fiscal quarter or a fiscal year starting on the first of
``accounting.fiscal_year_start``. A fiscal year is named by the calendar year in which it
ends (a year starting in April 2026 is FY2027; starting in January it is the calendar year).
A custom period is any ``[from, to)``. Budgets (``accounting.budgets``) cut their weeks, months
and quarters here too, so a budget's period and a report's period of the same kind agree.

The usage rollups are kept per UTC hour, so a report reads whole hours: an hour counts in the
period in which it begins (:func:`hour_range` rounds both ends up to a whole UTC hour).
Boundaries are therefore exact in every zone whose offset from UTC is a whole number of
hours; in a zone such as Asia/Kolkata (+05:30) the hour that holds local midnight counts in
the day before it. Adjacent periods share their boundary, so no hour counts twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal, get_args
from zoneinfo import ZoneInfo

from gpupool.spec.models import Accounting

PeriodKind = Literal["day", "week", "month", "quarter", "year"]
PERIOD_KINDS: tuple[str, ...] = get_args(PeriodKind)
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MAX_RANGE = timedelta(days=5 * 365 + 2)  # five years, leap days included
_HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Period:
    """``[start, end)`` in aware UTC times, and how a report names it."""

    start: datetime
    end: datetime
    label: str


def local_midnight(day: date, zone: ZoneInfo) -> datetime:
    # A midnight skipped by a DST change resolves to the first instant after it (fold=0).
    return datetime.combine(day, time(), tzinfo=zone).astimezone(UTC)


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)


def _fiscal_start(day: date, first_month: int) -> date:
    """The first day of the fiscal year that holds ``day``."""
    year = day.year if day.month >= first_month else day.year - 1
    return date(year, first_month, 1)


def bounds(kind: PeriodKind, day: date, accounting: Accounting) -> tuple[date, date, str]:
    """The local first day of the ``kind`` period holding ``day``, the next one's, and a label."""
    if kind == "day":
        return day, day + timedelta(days=1), day.isoformat()
    if kind == "week":
        first = day - timedelta(days=(day.weekday() - WEEKDAYS.index(accounting.week_start)) % 7)
        return first, first + timedelta(days=7), f"week of {first.isoformat()}"
    if kind == "month":
        first = day.replace(day=1)
        return first, _add_months(first, 1), f"{first:%Y-%m}"
    fiscal = _fiscal_start(day, accounting.fiscal_year_start)
    # Named by the calendar year it ends in: the year of its last month.
    name = f"FY{_add_months(fiscal, 11).year}"
    if kind == "year":
        return fiscal, _add_months(fiscal, 12), name
    quarter = ((day.year - fiscal.year) * 12 + day.month - fiscal.month) // 3
    first = _add_months(fiscal, 3 * quarter)
    return first, _add_months(first, 3), f"{name}-Q{quarter + 1}"


def period_of(kind: PeriodKind, day: date, accounting: Accounting) -> Period:
    """The ``kind`` period that holds the local date ``day``."""
    zone = ZoneInfo(accounting.timezone)
    first, after, label = bounds(kind, day, accounting)
    return Period(local_midnight(first, zone), local_midnight(after, zone), label)


def local_date(at: datetime, accounting: Accounting) -> date:
    """The date in ``accounting.timezone`` at the aware time ``at``."""
    return at.astimezone(ZoneInfo(accounting.timezone)).date()


def custom(start: datetime, end: datetime) -> Period:
    """The period ``[start, end)`` as given (aware times)."""
    return Period(start.astimezone(UTC), end.astimezone(UTC), f"{_iso(start)}/{_iso(end)}")


def split(whole: Period, kind: PeriodKind, accounting: Accounting) -> list[Period]:
    """``whole`` cut at the boundaries of ``kind`` periods; the first and last pieces keep the
    labels of the periods they belong to, clipped to ``whole``."""
    pieces: list[Period] = []
    at = whole.start
    while at < whole.end:
        period = period_of(kind, local_date(at, accounting), accounting)
        end = min(period.end, whole.end)
        pieces.append(Period(at, end, period.label))
        at = end
    return pieces


def ceil_hour(at: datetime) -> datetime:
    """The first whole UTC hour at or after ``at``."""
    floor = at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return floor if floor == at else floor + _HOUR


def hour_range(period: Period) -> tuple[datetime, datetime]:
    """The UTC hours ``[first, last)`` a report of ``period`` reads: those that begin in it."""
    return ceil_hour(period.start), ceil_hour(period.end)


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")
