"""UsageMeter keeps decayed_usage current incrementally; both must agree on any history."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.controller.fairshare import UsageInterval, UsageMeter, decayed_usage

HALF_LIFE = 3600.0

# (team, gpus, start, length): start offsets are large so the meter rebases several times.
intervals = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.integers(1, 8),
        st.floats(0, 400 * HALF_LIFE),
        st.floats(0, 5 * HALF_LIFE),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(intervals, st.floats(0, 1))
def test_meter_matches_decayed_usage(spans: list[tuple[str, int, float, float]], at: float) -> None:
    events = []  # (time, order, ...): ends before starts at the same time, like the engine
    for i, (team, gpus, start, length) in enumerate(spans):
        events.append((start, 1, i, team, gpus, start))
        events.append((start + length, 0, i, team, gpus, start))
    end_of_all = max((e[0] for e in events), default=0.0)
    now = at * end_of_all
    meter = UsageMeter(HALF_LIFE)
    for time, kind, _, team, gpus, start in sorted(events):
        if time > now:
            break
        if kind == 1:
            meter.start(team, gpus, time)
        else:
            meter.end(team, gpus, start, time)
    want = decayed_usage(
        [
            UsageInterval(team, gpus, start, None if start + length > now else start + length)
            for team, gpus, start, length in spans
            if start <= now
        ],
        now,
        HALF_LIFE,
    )
    got = meter.usage(now)
    for team in {"a", "b", "c"}:
        assert got.get(team, 0.0) == pytest.approx(want.get(team, 0.0), rel=1e-6, abs=1e-3)


def test_a_running_hour_then_a_half_life_of_rest() -> None:
    meter = UsageMeter(HALF_LIFE)
    meter.start("a", 2, 0.0)
    meter.end("a", 2, 0.0, HALF_LIFE)
    # 2 GPUs for one half-life: 2·h/ln2·(1 - 1/2); one half-life later it counts half.
    ran = 2 * HALF_LIFE / 0.6931471805599453 * 0.5
    assert meter.usage(HALF_LIFE)["a"] == pytest.approx(ran)
    assert meter.usage(2 * HALF_LIFE)["a"] == pytest.approx(ran / 2)
