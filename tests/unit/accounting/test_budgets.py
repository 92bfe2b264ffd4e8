"""Budget periods in the accounting zone, and a budget's state from usage."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.accounting import periods
from gpupool.accounting.budgets import GPU_HOURS, day_text, evaluate, period_at
from gpupool.spec.models import Accounting, Budget, ClusterConfig, GpuType, Pool

HOUR_MS = 3_600_000


@dataclass(frozen=True)
class Case:
    budget: Budget
    accounting: Accounting
    at: datetime
    start: datetime
    end: datetime
    label: str
    next_day: date


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)


MONTHLY = Budget(name="m", gpu_hours=10)
CASES = [
    pytest.param(
        Case(MONTHLY, Accounting(), utc(2027, 6, 15, 12), utc(2027, 6, 1), utc(2027, 7, 1),
             "June 2027", date(2027, 7, 1)),
        id="month in UTC",
    ),
    pytest.param(
        Case(MONTHLY, Accounting(timezone="America/New_York"), utc(2027, 7, 1, 2),
             utc(2027, 6, 1, 4), utc(2027, 7, 1, 4), "June 2027", date(2027, 7, 1)),
        id="month in New York: July 1 02:00 UTC is still June there",
    ),
    pytest.param(
        Case(MONTHLY, Accounting(), utc(2027, 12, 31, 23), utc(2027, 12, 1), utc(2028, 1, 1),
             "December 2027", date(2028, 1, 1)),
        id="December ends with the year",
    ),
    pytest.param(
        Case(Budget(name="w", period="week", gpu_hours=1), Accounting(week_start="sunday"),
             utc(2027, 6, 16), utc(2027, 6, 13), utc(2027, 6, 20), "the week of Jun 13, 2027",
             date(2027, 6, 20)),
        id="week from Sunday",
    ),
    pytest.param(
        Case(Budget(name="q", period="quarter", gpu_hours=1), Accounting(fiscal_year_start=4),
             utc(2027, 2, 10), utc(2027, 1, 1), utc(2027, 4, 1), "Q4 FY2027", date(2027, 4, 1)),
        id="quarter of a fiscal year starting in April",
    ),
    pytest.param(
        Case(Budget(name="c", period="custom", start=date(2027, 1, 10), end=date(2027, 3, 9),
                    gpu_hours=1),
             Accounting(timezone="Asia/Kolkata"), utc(2027, 3, 9, 18),
             utc(2027, 1, 9, 18, 30), utc(2027, 3, 9, 18, 30), "2027-01-10 to 2027-03-09",
             date(2027, 3, 10)),
        id="custom, both days included, in a half-hour zone",
    ),
]  # fmt: skip


@given(
    at=st.datetimes(
        min_value=datetime(2020, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
    ),
    kind=st.sampled_from(["week", "month", "quarter"]),
    zone=st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"]),
    week_start=st.sampled_from(["monday", "sunday"]),
    fiscal_year_start=st.integers(1, 12),
)
def test_a_budget_period_is_the_report_period_of_its_kind(
    at: datetime, kind: str, zone: str, week_start: str, fiscal_year_start: int
) -> None:
    accounting = Accounting(
        timezone=zone, week_start=week_start, fiscal_year_start=fiscal_year_start
    )
    budget = period_at(Budget(name="b", period=kind, gpu_hours=1), accounting, at)
    report = periods.period_of(kind, periods.local_date(at, accounting), accounting)  # type: ignore[arg-type]
    assert budget is not None and budget.contains(at)
    assert (budget.start, budget.end) == (report.start, report.end)


@pytest.mark.parametrize("case", CASES)
def test_period_at(case: Case) -> None:
    period = period_at(case.budget, case.accounting, case.at)
    assert period is not None
    assert (period.start, period.end, period.label) == (case.start, case.end, case.label)
    assert period.next_day == case.next_day and period.contains(case.at)


def test_a_custom_budget_is_not_in_force_outside_its_days() -> None:
    budget = Budget(name="c", period="custom", start=date(2027, 1, 1), end=date(2027, 1, 31))
    assert period_at(budget, Accounting(), utc(2027, 2, 1)) is None
    assert period_at(budget, Accounting(), utc(2026, 12, 31, 23, 59)) is None


CONFIG = ClusterConfig(
    gpu_types={"h100": GpuType(price_per_gpu_hour=4.0, spot_price_per_gpu_hour=1.5)},
    pools=[
        Pool(name="p", backend="local", gpu_type="h100", node={"gpus": 8}),
        Pool(name="s", backend="local", gpu_type="h100", node={"gpus": 8},
             autoscale={"mode": "autoscale", "node_type": "spot"}),
    ],
)  # fmt: skip
USAGE = {
    ("a", "h100", "p", "dedicated"): 100 * HOUR_MS,
    ("a", "h100", "s", "spot"): 40 * HOUR_MS,
    ("a", "t4", "q", "dedicated"): 10 * HOUR_MS,
    ("b", "h100", "p", "dedicated"): 999 * HOUR_MS,
}


def test_gpu_hour_budget_counts_the_team_s_hours_and_thresholds_reached() -> None:
    budget = Budget(name="m", gpu_hours=200, thresholds=[50, 80, 100])
    period = period_at(budget, CONFIG.accounting, utc(2027, 6, 2))
    assert period is not None
    state = evaluate(CONFIG, "a", budget, period, USAGE)
    assert (state.unit, state.used, state.limit) == (GPU_HOURS, 150.0, 200.0)
    assert state.reached == (50.0,) and state.status == "warning" and not state.over
    only_h100 = evaluate(CONFIG, "a", budget.model_copy(update={"gpu_type": "h100"}), period, USAGE)
    assert only_h100.used == 140.0


def test_money_budget_prices_each_pool_and_enforces_when_used_up() -> None:
    budget = Budget(name="m", amount=460, enforcement="hold")
    period = period_at(budget, CONFIG.accounting, utc(2027, 6, 2))
    assert period is not None
    state = evaluate(CONFIG, "a", budget, period, USAGE)
    # 100 h x 4.00 + 40 h x 1.50 (spot) + 10 h of a type the config no longer prices
    assert (state.unit, state.used) == ("USD", 460.0)
    assert state.over and state.enforced and state.reached == (50.0, 80.0, 100.0)
    assert state.remaining == 0.0 and state.status == "over"


def test_day_text() -> None:
    assert day_text(date(2027, 7, 1)) == "July 1"
