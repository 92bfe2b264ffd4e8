"""The job array specification: Slurm-like indices, limits, clear errors naming ``array``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.core.arrays import MAX_INDEX, is_array_id, parse_array, task_id
from gpupool.core.errors import InvalidRequest


@dataclass
class Good:
    spec: str
    indices: tuple[int, ...]


GOOD = [
    pytest.param(Good("0-4", (0, 1, 2, 3, 4)), id="range with both ends"),
    pytest.param(Good("0-9:2", (0, 2, 4, 6, 8)), id="range with a step"),
    pytest.param(Good("1,3,5", (1, 3, 5)), id="list"),
    pytest.param(Good(" 7 ", (7,)), id="one index, spaces around"),
    pytest.param(Good("5,0-2, 2", (0, 1, 2, 5)), id="mixed, sorted, duplicates once"),
    pytest.param(Good("3-3", (3,)), id="range of one"),
]


@pytest.mark.parametrize("case", GOOD)
def test_a_valid_spec_gives_its_indices(case: Good) -> None:
    assert parse_array(case.spec, max_tasks=100) == case.indices


@dataclass
class Bad:
    spec: str
    message: str
    max_tasks: int = 100


BAD = [
    pytest.param(Bad("", "empty"), id="empty"),
    pytest.param(Bad("0-100", "more than 100 tasks"), id="one past the limit"),
    pytest.param(Bad("0-999999999", "indices go up to"), id="index too large"),
    pytest.param(Bad("9-0", "low to high"), id="backwards"),
    pytest.param(Bad("0-9:0", "step"), id="zero step"),
    pytest.param(Bad("1,,2", "not an index"), id="empty item"),
    pytest.param(Bad("0-9%4", "not an index"), id="throttle"),
    pytest.param(Bad("x" * 2000, "longer than"), id="very long"),
    pytest.param(Bad("0-59,60-119", "more than 100 tasks"), id="limit over several items"),
]


@pytest.mark.parametrize("case", BAD)
def test_an_invalid_spec_names_the_array_field(case: Bad) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_array(case.spec, max_tasks=case.max_tasks)
    assert caught.value.details[0]["field"] == "array"
    assert case.message in caught.value.details[0]["message"]


def test_overlapping_items_count_their_distinct_indices() -> None:
    assert len(parse_array("0-59,0-59", max_tasks=60)) == 60


@given(
    first=st.integers(0, 5000),
    length=st.integers(0, 5000),
    step=st.integers(1, 50),
)
def test_a_stepped_range_is_pythons_range(first: int, length: int, step: int) -> None:
    last = first + length
    indices = parse_array(f"{first}-{last}:{step}", max_tasks=10_000)
    assert indices == tuple(range(first, last + 1, step))
    assert all(0 <= i <= MAX_INDEX for i in indices)


@given(st.lists(st.integers(0, 300), min_size=1, max_size=40))
def test_a_list_gives_its_distinct_indices_sorted(values: list[int]) -> None:
    assert parse_array(",".join(map(str, values)), max_tasks=100) == tuple(sorted(set(values)))


def test_task_ids_and_array_ids() -> None:
    assert task_id("a-0123456789ab", 7) == "a-0123456789ab_7"
    assert is_array_id("a-0123456789ab")
    assert not is_array_id("a-0123456789ab_7") and not is_array_id("j-0123456789ab")
