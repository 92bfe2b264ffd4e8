"""The ledger's time: whole milliseconds, cut at UTC hours, summing exactly."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.accounting.hours import epoch_ms, from_ms, hour_of, split_hours, unaccrued_ms

H = datetime(2026, 12, 31, 23, 0, tzinfo=UTC)  # the last hour of a day, month and year


@dataclass(frozen=True)
class Case:
    start: datetime
    end: datetime
    want: list[tuple[datetime, int]]


CASES = [
    pytest.param(Case(H, H + timedelta(minutes=30), [(H, 1_800_000)]), id="inside one hour"),
    pytest.param(
        Case(
            H + timedelta(minutes=45),
            H + timedelta(hours=1, minutes=15),
            [(H, 900_000), (H + timedelta(hours=1), 900_000)],
        ),
        id="across midnight into a new year",
    ),
    pytest.param(
        Case(
            H + timedelta(minutes=59, seconds=59, microseconds=999_500),
            H + timedelta(hours=2, microseconds=300),
            [(H, 1), (H + timedelta(hours=1), 3_600_000)],
        ),
        id="sub-millisecond ends floor to their millisecond",
    ),
    pytest.param(Case(H, H, []), id="an empty span"),
    pytest.param(Case(H + timedelta(hours=1), H, []), id="a reversed span counts nothing"),
    pytest.param(
        Case(H, H + timedelta(hours=3), [(H + timedelta(hours=i), 3_600_000) for i in range(3)]),
        id="whole hours",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_split_hours(case: Case) -> None:
    assert split_hours(case.start, case.end) == case.want


def test_epoch_ms_floors_and_round_trips() -> None:
    at = datetime(2026, 3, 1, 12, 0, 0, 123_999, tzinfo=UTC)
    assert epoch_ms(at) % 1000 == 123
    assert from_ms(epoch_ms(at)) == at.replace(microsecond=123_000)
    assert epoch_ms(datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)) == -1
    assert hour_of(at) == datetime(2026, 3, 1, 12, tzinfo=UTC)


def test_unaccrued_is_what_an_open_row_used_since_its_last_accrual() -> None:
    assert unaccrued_ms(4, H, H + timedelta(seconds=90)) == 4 * 90_000
    assert unaccrued_ms(4, H, H - timedelta(seconds=1)) == 0


times = st.datetimes(
    min_value=datetime(2025, 12, 31, 22), max_value=datetime(2026, 1, 2, 2), timezones=st.just(UTC)
)


@given(st.lists(times, min_size=2, max_size=8))
def test_pieces_and_consecutive_spans_sum_to_the_whole(cuts: list[datetime]) -> None:
    cuts.sort()
    total = sum(ms for a, b in itertools.pairwise(cuts) for _, ms in split_hours(a, b))
    assert total == epoch_ms(cuts[-1]) - epoch_ms(cuts[0])
    for a, b in itertools.pairwise(cuts):
        pieces = split_hours(a, b)
        assert all(0 < ms <= 3_600_000 for _, ms in pieces)
        assert all(epoch_ms(hour) % 3_600_000 == 0 for hour, _ in pieces)
