"""Stable hashing and weighted rendezvous ordering (gpupool.core.hashing)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from gpupool.core.hashing import rendezvous_order, rendezvous_score, stable_hash64


def test_stable_hash64_known_values() -> None:
    # Pinned values: a change here changes every tie-break in every deployed cluster.
    assert stable_hash64("") == 0xE4A6A0577479B2B4
    assert stable_hash64("job-1") == 136856926666863979
    assert rendezvous_order("job-1", [("a", 1.0), ("b", 1.0), ("c", 1.0)]) == ["b", "c", "a"]


def test_stable_hash64_is_stable_across_processes() -> None:
    code = "from gpupool.core.hashing import stable_hash64; print(stable_hash64('job-1'))"
    other = subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env={"PYTHONHASHSEED": "12345"},
    )
    assert int(other.stdout) == stable_hash64("job-1")


@pytest.mark.parametrize(
    "candidates",
    [
        pytest.param([("a", 1.0), ("b", 1.0), ("c", 1.0)], id="equal weights"),
        pytest.param([("pool-x", 8.0), ("pool-y", 2.0)], id="unequal weights"),
    ],
)
def test_rendezvous_order_ignores_candidate_order(candidates: list[tuple[str, float]]) -> None:
    for key in ("job-1", "job-2", "job-3"):
        assert rendezvous_order(key, candidates) == rendezvous_order(key, candidates[::-1])
        assert sorted(rendezvous_order(key, candidates)) == sorted(n for n, _ in candidates)


def test_rendezvous_removing_a_candidate_moves_only_its_keys() -> None:
    full = [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 1.0)]
    without_c = [c for c in full if c[0] != "c"]
    for i in range(500):
        key = f"job-{i}"
        before = rendezvous_order(key, full)
        after = rendezvous_order(key, without_c)
        assert after == [name for name in before if name != "c"]


def test_rendezvous_winners_follow_weights() -> None:
    candidates = [("small", 1.0), ("large", 3.0)]
    wins = Counter(rendezvous_order(f"job-{i}", candidates)[0] for i in range(4000))
    # Expected 3:1 -> large wins ~75%; a generous band keeps this a sanity check, not a coin toss.
    assert 0.70 < wins["large"] / 4000 < 0.80


def test_rendezvous_equal_weights_spread_evenly() -> None:
    candidates = [("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 1.0)]
    wins = Counter(rendezvous_order(f"job-{i}", candidates)[0] for i in range(4000))
    assert all(850 < wins[name] < 1150 for name in "abcd")


@pytest.mark.parametrize(
    ("candidates", "match"),
    [
        pytest.param([("a", 0.0)], "positive", id="zero weight"),
        pytest.param([("a", -1.0)], "positive", id="negative weight"),
        pytest.param([("a", 1.0), ("a", 2.0)], "unique", id="duplicate names"),
    ],
)
def test_rendezvous_rejects_bad_candidates(candidates: list[tuple[str, float]], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        rendezvous_order("job", candidates)


def test_rendezvous_score_is_finite_and_positive() -> None:
    for i in range(1000):
        score = rendezvous_score(f"k{i}", "pool", 2.0)
        assert 0 < score < float("inf")
