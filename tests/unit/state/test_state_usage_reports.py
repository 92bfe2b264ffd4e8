"""Usage and cost reports read from ledger rows on SQLite and PostgreSQL (C1, C2): the summary
with idle sharing, running attempts up to now, gaps as missing, who sees what, the detail.
``engine`` (tests/unit/state/conftest.py) is an empty store on each."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpupool.auth.principal import Principal, principal_for
from gpupool.core.errors import Forbidden, InvalidRequest, NotFound
from gpupool.server.services.usage import ReportQuery, UsageService
from gpupool.spec.load import load_config
from gpupool.spec.models import ClusterConfig
from gpupool.state.db import Engine, session_factory
from support.ledger import LedgerBuilder

DEMO = Path(__file__).resolve().parents[3] / "examples" / "demo.yaml"
H100 = "demo-shared-dev-h100-pool"
T4 = "demo-shared-dev-t4-pool"
T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)  # a Monday, inside November
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
NOVEMBER = ReportQuery(period="month", at="2026-11-15")


@dataclass
class Clock:
    at: datetime

    def now(self) -> datetime:
        return self.at

    def monotonic(self) -> float:
        return time.monotonic()


def service(engine: Engine, ledger: LedgerBuilder, idle_cost: str = "unshared") -> UsageService:
    config = load_config(DEMO)
    config = config.model_copy(
        update={"accounting": config.accounting.model_copy(update={"idle_cost": idle_cost})}
    )
    sessions = session_factory(engine)
    ledger.write(sessions)
    return UsageService(sessions, lambda: config, Clock(NOW))


def who(user: str) -> Principal:
    config: ClusterConfig = load_config(DEMO)
    return principal_for(config, user, "t")


def hours(start: datetime, count: int) -> list[datetime]:
    return [start + timedelta(hours=i) for i in range(count)]


def rows_by(report: object, *fields: str) -> dict[tuple[object, ...], object]:
    return {tuple(getattr(r, f) for f in fields): r for r in report.rows}  # type: ignore[attr-defined]


def test_summary_splits_within_and_borrowed_and_prices_them(engine: Engine) -> None:
    ledger = LedgerBuilder()
    # 2 GPUs for 90 minutes, one of them borrowed; crosses an hour boundary.
    ledger.attempt(
        team="team-a",
        start=T0 + timedelta(minutes=30),
        end=T0 + timedelta(hours=2),
        gpus=2,
        borrowed=1,
    )
    ledger.attempt(
        team="team-b", start=T0, end=T0 + timedelta(hours=1), gpu_type="t4", pool=T4, user="bob"
    )
    # Outside November: not counted.
    ledger.attempt(
        team="team-a",
        start=datetime(2026, 10, 30, tzinfo=UTC),
        end=datetime(2026, 10, 31, tzinfo=UTC),
    )
    report = service(engine, ledger).costs(who("admin"), NOVEMBER)
    rows = rows_by(report, "team", "gpu_type")
    a = rows["team-a", "h100"]
    assert (a.allocated_gpu_hours, a.borrowed_gpu_hours) == (1.5, 1.5)
    assert a.allocated_cost == pytest.approx(1.5 * 4.0) and a.borrowed_cost == pytest.approx(6.0)
    b = rows["team-b", "t4"]
    assert (b.allocated_gpu_hours, b.borrowed_gpu_hours) == (1.0, 0.0)
    assert b.total_cost == pytest.approx(0.35)
    assert report.currency == "USD" and report.rows[0].period == "2026-11"
    assert report.missing == []


def test_running_attempt_counts_up_to_now(engine: Engine) -> None:
    ledger = LedgerBuilder()
    # Accrued to 11:00; now is 12:00: the last hour is not in the rollups yet.
    ledger.attempt(
        team="team-a",
        start=NOW - timedelta(hours=3),
        accrued_until=NOW - timedelta(hours=1),
        gpus=4,
        borrowed=2,
    )
    report = service(engine, ledger).usage(who("admin"), NOVEMBER)
    row = rows_by(report, "team", "gpu_type")["team-a", "h100"]
    assert (row.allocated_gpu_hours, row.borrowed_gpu_hours) == (6.0, 6.0)
    # The detailed report agrees with the summary.
    detail = service(engine, LedgerBuilder()).usage_attempts(
        who("admin"), NOVEMBER, limit=10, cursor=None
    )
    (line,) = detail.items
    assert (line.allocated_gpu_hours, line.borrowed_gpu_hours, line.outcome) == (6.0, 6.0, None)


def test_idle_unshared_is_its_own_row_per_pool(engine: Engine) -> None:
    ledger = LedgerBuilder()
    ledger.pool_capacity(H100, "h100", 4, hours(T0, 2))
    ledger.attempt(team="team-a", start=T0, end=T0 + timedelta(hours=2))
    report = service(engine, ledger).costs(who("admin"), NOVEMBER)
    rows = rows_by(report, "team", "gpu_type", "pool")
    idle = rows["(idle)", "h100", H100]
    assert idle.idle_gpu_hours == 6.0 and idle.idle_cost == pytest.approx(24.0)
    assert rows["team-a", "h100", None].idle_gpu_hours == 0.0


def test_idle_proportional_follows_use_of_the_pool(engine: Engine) -> None:
    ledger = LedgerBuilder()
    ledger.pool_capacity(H100, "h100", 4, hours(T0, 2))  # 8 GPU-hours
    ledger.attempt(team="team-a", start=T0, end=T0 + timedelta(hours=1))  # 1
    ledger.attempt(team="team-b", start=T0, end=T0 + timedelta(hours=1), gpus=3, user="bob")  # 3
    report = service(engine, ledger, "proportional").usage(who("admin"), NOVEMBER)
    rows = rows_by(report, "team", "gpu_type")
    assert rows["team-a", "h100"].idle_gpu_hours == pytest.approx(1.0)
    assert rows["team-b", "h100"].idle_gpu_hours == pytest.approx(3.0)
    assert ("(idle)", "h100") not in rows
    # A member sees their team's share, and nothing of other teams or of idle rows.
    mine = service(engine, LedgerBuilder(), "proportional").usage(who("alice"), NOVEMBER)
    assert [(r.team, r.idle_gpu_hours) for r in mine.rows] == [("team-a", pytest.approx(1.0))]


def test_idle_even_goes_to_teams_with_quota_of_the_type(engine: Engine) -> None:
    ledger = LedgerBuilder()
    ledger.pool_capacity(H100, "h100", 4, hours(T0, 1))
    ledger.pool_capacity(T4, "t4", 4, hours(T0, 1))
    report = service(engine, ledger, "even").usage(who("admin"), NOVEMBER)
    rows = rows_by(report, "team", "gpu_type")
    # h100: team-a and team-b have nominal quota; t4: all three teams.
    assert rows["team-a", "h100"].idle_gpu_hours == pytest.approx(2.0)
    assert rows["team-b", "h100"].idle_gpu_hours == pytest.approx(2.0)
    assert ("team-c", "h100") not in rows
    assert rows["team-c", "t4"].idle_gpu_hours == pytest.approx(4 / 3)


def test_grouped_by_user_keeps_idle_on_its_own_rows(engine: Engine) -> None:
    ledger = LedgerBuilder()
    ledger.pool_capacity(H100, "h100", 2, hours(T0, 1))
    ledger.attempt(team="team-a", start=T0, end=T0 + timedelta(hours=1), user="alice")
    ledger.attempt(team="team-a", start=T0, end=T0 + timedelta(minutes=30), user="carol")
    report = service(engine, ledger, "proportional").usage(
        who("admin"), ReportQuery(period="month", at="2026-11-15", group_by="user")
    )
    assert {r.user: r.allocated_gpu_hours for r in report.rows if r.user != "(idle)"} == {
        "alice": 1.0,
        "carol": 0.5,
    }
    (idle,) = [r for r in report.rows if r.user == "(idle)"]
    assert (idle.pool, idle.idle_gpu_hours) == (H100, 0.5)


def test_gaps_in_range_are_missing_not_zero(engine: Engine) -> None:
    ledger = LedgerBuilder()
    ledger.gap(datetime(2026, 10, 31, 20, tzinfo=UTC), datetime(2026, 11, 1, 2, tzinfo=UTC))
    ledger.gap(datetime(2026, 12, 3, tzinfo=UTC), datetime(2026, 12, 4, tzinfo=UTC))
    report = service(engine, ledger).usage(who("admin"), NOVEMBER)
    assert [(m.start, m.end) for m in report.missing] == [
        (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 1, 2, tzinfo=UTC))
    ]


def test_periods_cut_a_range_and_rows_follow(engine: Engine) -> None:
    ledger = LedgerBuilder()
    ledger.attempt(team="team-a", start=T0, end=T0 + timedelta(hours=1))  # Monday 2 Nov
    ledger.attempt(team="team-a", start=T0 + timedelta(days=7), end=T0 + timedelta(days=7, hours=2))
    report = service(engine, ledger).usage(
        who("alice"),
        ReportQuery(start="2026-11-02", end="2026-11-16", period="week", team="team-a"),
    )
    assert [(r.period, r.allocated_gpu_hours) for r in report.rows] == [
        ("week of 2026-11-02", 1.0),
        ("week of 2026-11-09", 2.0),
    ]


def test_who_may_ask_for_which_team(engine: Engine) -> None:
    svc = service(engine, LedgerBuilder())
    with pytest.raises(NotFound):
        svc.usage(who("alice"), ReportQuery(team="team-z"))
    with pytest.raises(Forbidden):
        svc.usage(who("bob"), ReportQuery(team="team-a"))
    assert svc.usage(who("vera"), ReportQuery(team="team-a")).rows == []
    with pytest.raises(InvalidRequest) as bad:
        svc.usage(who("admin"), ReportQuery(group_by="team,colour"))
    assert bad.value.details[0]["field"] == "group_by" and "priority_class" in bad.value.message


def test_attempt_pages_follow_the_cursor(engine: Engine) -> None:
    ledger = LedgerBuilder()
    for i in range(5):
        ledger.attempt(
            team="team-a", start=T0 + timedelta(hours=i), end=T0 + timedelta(hours=i + 1)
        )
    ledger.attempt(team="team-b", start=T0, end=T0 + timedelta(hours=1), user="bob")
    svc = service(engine, ledger)
    first = svc.usage_attempts(who("alice"), NOVEMBER, limit=3, cursor=None)
    second = svc.usage_attempts(who("alice"), NOVEMBER, limit=3, cursor=first.next_cursor)
    assert [x.attempt_id for x in first.items + second.items] == [1, 2, 3, 4, 5]
    assert second.next_cursor is None
    everyone = svc.cost_attempts(who("admin"), NOVEMBER, limit=100, cursor=None)
    assert {x.team for x in everyone.items} == {"team-a", "team-b"}
    assert everyone.items[0].total_cost == pytest.approx(4.0)


def test_use_in_hours_without_capacity_leaves_idle_alone(engine: Engine) -> None:
    ledger = LedgerBuilder()
    # Capacity in hours 0, 1 and 4 (hours 2-3 were a gap); 1 GPU busy from hour 0 to 5.
    ledger.pool_capacity(H100, "h100", 4, [T0, T0 + timedelta(hours=1), T0 + timedelta(hours=4)])
    ledger.gap(T0 + timedelta(hours=2), T0 + timedelta(hours=4))
    ledger.attempt(team="team-a", start=T0, end=T0 + timedelta(hours=5))
    report = service(engine, ledger).usage(who("admin"), NOVEMBER)
    rows = rows_by(report, "team", "gpu_type")
    assert rows["team-a", "h100"].allocated_gpu_hours == 5.0  # the attempt held its GPU
    assert rows["(idle)", "h100"].idle_gpu_hours == 12.0 - 3.0
    assert len(report.missing) == 1
