"""Decayed historical usage per team (Q4), the input the scheduler breaks share ties with.

Usage is GPU-seconds weighted by ``2^(-age / half_life)``: a GPU-hour used one half-life ago
counts half. For an interval [start, end] of ``g`` GPUs the integral is closed-form:
``g · h/ln2 · (2^(-(now-end)/h) - 2^(-(now-start)/h))``. Pure: the caller passes the time.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

# Intervals that ended this many half-lives ago weigh less than 0.1 % and are not loaded.
HORIZON_HALF_LIVES = 10


@dataclass(frozen=True, slots=True)
class UsageInterval:
    team: str
    gpus: int
    start: float
    end: float | None  # None: still running


def decayed_usage(
    intervals: Iterable[UsageInterval], now: float, half_life_s: float
) -> dict[str, float]:
    scale = half_life_s / math.log(2)
    totals: dict[str, float] = defaultdict(float)
    for interval in intervals:
        end = now if interval.end is None else min(interval.end, now)
        start = min(interval.start, end)
        weight = 2 ** (-(now - end) / half_life_s) - 2 ** (-(now - start) / half_life_s)
        totals[interval.team] += interval.gpus * scale * weight
    return dict(totals)
