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


class UsageMeter:
    """:func:`decayed_usage` kept up to date as attempts start and end, in O(teams) per read.

    For the simulator, which would otherwise sum every interval of a long trace at each
    cycle. Per team it keeps the decayed GPU-seconds of ended intervals as of ``_at``, and for
    running GPUs ``Σ g·2^((start - base)/h)``, which gives their decayed integral at any
    ``now`` in closed form. ``base`` moves forward (rescaling the sums) so the exponents stay
    small over any trace length. Times must not go backwards.
    """

    REBASE_HALF_LIVES = 32.0

    def __init__(self, half_life_s: float) -> None:
        self._h = half_life_s
        self._scale = half_life_s / math.log(2)
        self._base = 0.0
        self._ended: dict[str, float] = defaultdict(float)  # decayed GPU-s as of self._at
        self._at = 0.0
        self._gpus: dict[str, int] = defaultdict(int)  # running GPUs per team
        self._weighted: dict[str, float] = defaultdict(float)  # Σ g·2^((start - base)/h)

    def _advance(self, now: float) -> None:
        if now > self._at:
            factor = 2 ** (-(now - self._at) / self._h)
            for team in self._ended:
                self._ended[team] *= factor
            self._at = now
        if now - self._base > self.REBASE_HALF_LIVES * self._h:
            factor = 2 ** (-(now - self._base) / self._h)
            for team in self._weighted:
                self._weighted[team] *= factor
            self._base = now

    def start(self, team: str, gpus: int, at: float) -> None:
        self._advance(at)
        self._gpus[team] += gpus
        self._weighted[team] += gpus * 2 ** ((at - self._base) / self._h)

    def end(self, team: str, gpus: int, started: float, at: float) -> None:
        """The interval ``[started, at]`` of ``gpus`` GPUs, started with :meth:`start`, ended."""
        self._advance(at)
        self._gpus[team] -= gpus
        self._weighted[team] -= gpus * 2 ** ((started - self._base) / self._h)
        self._ended[team] += gpus * self._scale * (1 - 2 ** (-(at - started) / self._h))

    def usage(self, now: float) -> dict[str, float]:
        """Decayed GPU-seconds per team at ``now``, as :func:`decayed_usage` computes them."""
        self._advance(now)
        decay_now = 2 ** (-(now - self._base) / self._h)
        out = {}
        for team in self._ended.keys() | self._gpus.keys():
            running = self._scale * (self._gpus[team] - self._weighted[team] * decay_now)
            total = self._ended[team] + max(0.0, running)
            if total > 0:
                out[team] = total
        return out
