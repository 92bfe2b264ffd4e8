"""The pure part of the reports: holes in capacity, idle per pool, idle shares, grouping,
and an attempt's time within a range."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpupool.accounting.reports import (
    Attempt,
    OpenAttempt,
    PoolCapacity,
    attempt_line,
    holes,
    idle_per_pool,
    idle_shares,
    parse_group_by,
    unaccrued,
)
from gpupool.spec.load import load_config

DEMO = Path(__file__).resolve().parents[3] / "examples" / "demo.yaml"
T0 = datetime(2026, 11, 2, tzinfo=UTC)
H = timedelta(hours=1)


def test_holes_are_the_hours_without_a_row() -> None:
    present = [T0 + 2 * H, T0 + 3 * H, T0 + 6 * H]
    assert holes(T0, T0 + 8 * H, present) == (
        (T0, T0 + 2 * H),
        (T0 + 4 * H, T0 + 6 * H),
        (T0 + 7 * H, T0 + 8 * H),
    )
    assert holes(T0, T0 + 2 * H, [T0, T0 + H]) == ()


def test_idle_leaves_out_use_in_hours_without_capacity() -> None:
    pool = PoolCapacity("p", gpu_ms=4 * 3_600_000, holes=((T0 + H, T0 + 2 * H),))
    # 3 GPU-hours used, 2 of them in the hole; 1 GPU-hour still unaccrued, in a covered hour.
    late = {(T0, "p"): 3_600_000, (T0 + H, "p"): 3_600_000}
    idle = idle_per_pool([pool], {"p": 3 * 3_600_000}, {"p": 2 * 3_600_000}, late)
    assert idle == {"p": 2 * 3_600_000}
    # Never negative.
    assert idle_per_pool([pool], {"p": 9 * 3_600_000}, {}, {}) == {"p": 0}


def test_proportional_shares_without_users_stay_unshared() -> None:
    config = load_config(DEMO)
    config = config.model_copy(
        update={"accounting": config.accounting.model_copy(update={"idle_cost": "proportional"})}
    )
    shares = idle_shares(
        config, {"a": 900, "b": 600}, {"a": {"team-a": 1, "team-b": 2}, "b": {"team-a": 0}}
    )
    assert shares == {"a": {"team-a": 300.0, "team-b": 600.0}}


def test_group_by_is_validated() -> None:
    assert parse_group_by(None) == ("team", "gpu_type")
    assert parse_group_by("pool, user,pool") == ("pool", "user")
    with pytest.raises(ValueError, match="colour"):
        parse_group_by("team,colour")


def test_running_attempt_counts_from_its_accrual_to_now_within_the_range() -> None:
    running = OpenAttempt(
        "team-a",
        "alice",
        "h100",
        "p",
        "training",
        "dedicated",
        2,
        1,
        T0 + 90 * timedelta(minutes=1),
    )
    uses, per_hour = unaccrued([running], T0, T0 + 3 * H, now=T0 + 5 * H)
    (use,) = uses
    assert (use.gpu_ms, use.borrowed_gpu_ms) == (2 * 90 * 60_000, 90 * 60_000)
    assert per_hour == {(T0 + H, "p"): 2 * 30 * 60_000, (T0 + 2 * H, "p"): 2 * 3_600_000}


def test_an_attempt_line_is_clipped_to_the_range() -> None:
    config = load_config(DEMO)
    attempt = Attempt(
        1, "j", "n", "team-a", "alice", "h100", "demo-shared-dev-h100-pool", "local",
        "training", "dedicated", 4, 1, T0 - H, T0 + 2 * H, "succeeded",
    )  # fmt: skip
    line = attempt_line(config, attempt, T0, T0 + H, now=T0 + 9 * H)
    assert (line.allocated_gpu_ms, line.borrowed_gpu_ms) == (3 * 3_600_000, 3_600_000)
    assert line.total_cost == pytest.approx(4 * 4.0)
