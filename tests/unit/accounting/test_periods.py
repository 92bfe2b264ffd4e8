"""Report periods in the accounting timezone: week start, fiscal quarters and years, DST,
and the UTC hours a report reads."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from hypothesis import given
from hypothesis import strategies as st

from gpupool.accounting.periods import (
    ceil_hour,
    custom,
    hour_range,
    local_date,
    period_of,
    split,
)
from gpupool.spec.models import Accounting


def test_a_month_in_paris_starts_at_local_midnight() -> None:
    paris = Accounting(timezone="Europe/Paris")
    month = period_of("month", date(2026, 11, 17), paris)
    assert (month.start, month.end, month.label) == (
        datetime(2026, 10, 31, 23, tzinfo=UTC),
        datetime(2026, 11, 30, 23, tzinfo=UTC),
        "2026-11",
    )


def test_a_day_across_a_dst_change_has_23_hours() -> None:
    day = period_of("day", date(2026, 3, 29), Accounting(timezone="Europe/Paris"))
    assert day.end - day.start == timedelta(hours=23)


def test_weeks_start_on_the_configured_day() -> None:
    sunday = Accounting(week_start="sunday")
    week = period_of("week", date(2026, 12, 4), sunday)  # a Friday
    assert (week.start.date(), week.label) == (date(2026, 11, 29), "week of 2026-11-29")
    assert period_of("week", date(2026, 12, 4), Accounting()).start.date() == date(2026, 11, 30)


def test_fiscal_years_are_named_by_the_year_they_end() -> None:
    april = Accounting(fiscal_year_start=4)
    year = period_of("year", date(2026, 12, 4), april)
    assert (year.start.date(), year.end.date(), year.label) == (
        date(2026, 4, 1),
        date(2027, 4, 1),
        "FY2027",
    )
    quarter = period_of("quarter", date(2027, 2, 10), april)
    assert (quarter.start.date(), quarter.end.date(), quarter.label) == (
        date(2027, 1, 1),
        date(2027, 4, 1),
        "FY2027-Q4",
    )
    assert period_of("quarter", date(2026, 5, 1), Accounting()).label == "FY2026-Q2"


def test_split_cuts_at_boundaries_and_keeps_the_ends() -> None:
    whole = custom(datetime(2026, 11, 28, 12, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC))
    pieces = split(whole, "month", Accounting())
    assert [(p.label, p.start, p.end) for p in pieces] == [
        ("2026-11", whole.start, datetime(2026, 12, 1, tzinfo=UTC)),
        ("2026-12", datetime(2026, 12, 1, tzinfo=UTC), whole.end),
    ]


def test_in_a_half_hour_zone_the_boundary_hour_counts_in_the_day_before() -> None:
    kolkata = Accounting(timezone="Asia/Kolkata")
    day = period_of("day", date(2026, 12, 4), kolkata)
    assert day.start == datetime(2026, 12, 3, 18, 30, tzinfo=UTC)
    assert hour_range(day) == (
        datetime(2026, 12, 3, 19, tzinfo=UTC),
        datetime(2026, 12, 4, 19, tzinfo=UTC),
    )


@given(st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)))
def test_ceil_hour_is_the_first_whole_hour_not_before(at: datetime) -> None:
    aware = at.replace(tzinfo=UTC)
    up = ceil_hour(aware)
    assert up >= aware and up - aware < timedelta(hours=1)
    assert (up.minute, up.second, up.microsecond) == (0, 0, 0)


@given(
    st.dates(min_value=date(2000, 1, 1), max_value=date(2099, 12, 1)),
    st.sampled_from(["day", "week", "month", "quarter", "year"]),
    st.sampled_from(["UTC", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]),
    st.integers(min_value=1, max_value=12),
)
def test_periods_hold_their_day_and_tile(day: date, kind: str, zone: str, fiscal: int) -> None:
    accounting = Accounting(timezone=zone, fiscal_year_start=fiscal)
    period = period_of(kind, day, accounting)  # type: ignore[arg-type]
    midnight = datetime.combine(day, time(), tzinfo=ZoneInfo(zone))
    assert period.start <= midnight < period.end
    # The next period starts where this one ends: no hour is in two periods or in none.
    following = period_of(kind, local_date(period.end, accounting), accounting)  # type: ignore[arg-type]
    assert following.start == period.end
