"""Quota arithmetic and the cohort balance (gpupool.core.quota)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.core.quota import (
    CohortBalance,
    Quota,
    QuotaVerdict,
    check_quota,
    weighted_share,
)


@dataclass(frozen=True)
class Case:
    quota: Quota
    used: int
    need: int
    cohort: CohortBalance | None
    want: QuotaVerdict
    want_borrowed: int = 0


CASES = [
    pytest.param(Case(Quota(4), 0, 4, None, QuotaVerdict.WITHIN_NOMINAL), id="fills nominal"),
    pytest.param(Case(Quota(4), 4, 0, None, QuotaVerdict.WITHIN_NOMINAL), id="cpu-only job"),
    pytest.param(
        Case(Quota(4), 6, 0, None, QuotaVerdict.WITHIN_NOMINAL), id="cpu-only job while borrowing"
    ),
    pytest.param(Case(Quota(4), 3, 2, None, QuotaVerdict.OVER_LIMIT, 1), id="no cohort"),
    pytest.param(
        Case(Quota(2, 2), 0, 4, CohortBalance(4, 0), QuotaVerdict.BORROWS, 2),
        id="borrows exactly what others have idle",
    ),
    pytest.param(
        Case(Quota(2, 1), 0, 4, CohortBalance(10, 0), QuotaVerdict.OVER_LIMIT, 2),
        id="beyond borrowing limit",
    ),
    pytest.param(
        Case(Quota(2), 0, 40, CohortBalance(40, 0), QuotaVerdict.BORROWS, 38),
        id="unlimited borrowing limit",
    ),
    pytest.param(
        Case(Quota(2, 2), 2, 2, CohortBalance(3, 2), QuotaVerdict.COHORT_SHORT, 2),
        id="idle already lent to others",
    ),
    pytest.param(
        # The team's own unused nominal (1 of its 4) counts in L but is not lendable to itself.
        Case(Quota(4), 3, 3, CohortBalance(2, 0), QuotaVerdict.COHORT_SHORT, 2),
        id="own unused nominal is not borrowed from itself",
    ),
    pytest.param(
        Case(Quota(4), 3, 3, CohortBalance(3, 0), QuotaVerdict.BORROWS, 2),
        id="crosses nominal by borrowing the excess",
    ),
    pytest.param(
        Case(Quota(0), 0, 1, CohortBalance(0, 0), QuotaVerdict.COHORT_SHORT, 1),
        id="empty cohort",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_check_quota(case: Case) -> None:
    check = check_quota(case.quota, case.used, case.need, case.cohort)
    assert check.verdict is case.want
    assert check.borrowed == case.want_borrowed
    assert check.fits == (case.want in (QuotaVerdict.WITHIN_NOMINAL, QuotaVerdict.BORROWS))


@pytest.mark.parametrize(
    ("quota", "used", "want_lendable", "want_borrowed"),
    [
        pytest.param(Quota(4), 1, 3, 0, id="unused nominal is lendable"),
        pytest.param(Quota(4, lending_limit=1), 1, 1, 0, id="capped by lending limit"),
        pytest.param(Quota(4, lending_limit=5), 3, 1, 0, id="cap above unused"),
        pytest.param(Quota(4), 6, 0, 2, id="borrowing team lends nothing"),
        pytest.param(Quota(), 0, 0, 0, id="no quota"),
    ],
)
def test_lendable_and_borrowed(
    quota: Quota, used: int, want_lendable: int, want_borrowed: int
) -> None:
    assert quota.lendable(used) == want_lendable
    assert quota.borrowed(used) == want_borrowed


def test_ceiling() -> None:
    assert Quota(2, 3).ceiling == 5
    assert Quota(2).ceiling is None


quotas = st.builds(
    Quota,
    st.integers(0, 8),
    st.none() | st.integers(0, 8),
    st.none() | st.integers(0, 8),
)


@settings(max_examples=100, deadline=None)
@given(
    members=st.lists(st.tuples(quotas, st.integers(0, 12)), min_size=1, max_size=5),
    who=st.integers(0, 4),
    need=st.integers(0, 10),
)
def test_borrowing_keeps_cohort_invariant(
    members: list[tuple[Quota, int]], who: int, need: int
) -> None:
    """Admitting a borrowing request leaves ``B <= L``; admitting within nominal never borrows."""
    who %= len(members)
    balance = CohortBalance()
    for quota, used in members:
        balance = balance.with_member(quota, used)
    quota, used = members[who]
    check = check_quota(quota, used, need, balance)
    after = balance.moved(quota, used, used + need)
    if check.verdict is QuotaVerdict.BORROWS:
        assert after.borrowed <= after.lendable
        assert quota.ceiling is None or used + need <= quota.ceiling
    if check.verdict is QuotaVerdict.WITHIN_NOMINAL:
        assert after.borrowed == balance.borrowed
    # moved() agrees with recomputing the sums from scratch.
    fresh = CohortBalance()
    for i, (q, u) in enumerate(members):
        fresh = fresh.with_member(q, u + need if i == who else u)
    assert fresh == after


_PRICES = {"h100": 4.0, "t4": 0.5}  # cluster value: 8 x 4 + 64 x 0.5 = 64


@pytest.mark.parametrize(
    ("borrowed", "weight", "prices", "want"),
    [
        pytest.param({}, 1.0, None, 0.0, id="nothing borrowed"),
        pytest.param({"h100": 2}, 1.0, None, 2 / 72, id="unweighted: a GPU is a GPU"),
        pytest.param({"h100": 1, "t4": 32}, 1.0, None, 33 / 72, id="types add up"),
        pytest.param({"h100": 2}, 1.0, _PRICES, 8 / 64, id="priced: an h100 is worth 4"),
        pytest.param({"t4": 8}, 1.0, _PRICES, 4 / 64, id="priced: eight t4s are worth 4"),
        pytest.param({"h100": 1, "t4": 8}, 1.0, _PRICES, 8 / 64, id="priced types add up"),
        pytest.param({"h100": 2}, 2.0, _PRICES, 4 / 64, id="weight divides"),
        pytest.param({"h100": 2}, 0.0, None, math.inf, id="zero weight goes last"),
        pytest.param({"gone": 5}, 1.0, None, 0.0, id="type without capacity is skipped"),
    ],
)
def test_weighted_share(
    borrowed: dict[str, int], weight: float, prices: dict[str, float] | None, want: float
) -> None:
    assert weighted_share(borrowed, {"h100": 8, "t4": 64}, weight, prices) == pytest.approx(want)


def test_one_h100_counts_more_than_one_t4_whatever_the_pool_sizes() -> None:
    for capacity in ({"h100": 8, "t4": 64}, {"h100": 1000, "t4": 8}):
        h100 = weighted_share({"h100": 1}, capacity, 1.0, _PRICES)
        t4 = weighted_share({"t4": 1}, capacity, 1.0, _PRICES)
        assert h100 == pytest.approx(8 * t4)
