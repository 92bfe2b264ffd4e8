"""How long a job will run, for a forecast: its runtime limit, or what similar past jobs ran.

A job with ``max_runtime_s`` ends by its start plus that limit: the forecast takes the limit
(an upper bound: a job that ends earlier lets the next one start earlier). A job without one
is estimated from the finished attempts of *similar* jobs: the same team, gpu type and size
(GPUs of the whole job), else the same team and gpu type, else the gpu type, else any job; with
no past job at all, :data:`DEFAULT_RUNTIME_S`. A job that starts (in a forecast) runs the mean
of those runtimes: they are heavy-tailed, and a job far down a queue waits for the sum of many
of them, which the median understates. Its spread is their 25th percentile to the larger of
their 75th percentile and the mean, so a forecast can be given as a range.

A job that is running already has outlived some of its similar jobs: its remaining time is
estimated from the past runtimes longer than what it has run: their median, less what it ran
(its end is one event, even odds either side; the mean residual of a heavy tail grows without
bound and made forecasts late), within their 25th and 75th percentiles. One that has outlived
them all is taken to run half as long again (0 to as long again).

On the first 10,000 Philly jobs (docs/forecast.md), medians for both put forecasts of the jobs
that waited at a quarter of their waits, means for both at 2-3 times them; this choice gave a
median error of 1.2 h on a median wait of 5.0 h.

Pure: the samples are handed in (the server reads them from the store, the simulator from
its own finished jobs); nothing here reads a clock or a store.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEFAULT_RUNTIME_S = 3600.0
# Below this many similar past jobs the next, wider level of similarity is used instead.
MIN_SAMPLES = 3


@dataclass(frozen=True, slots=True)
class Runtime:
    """An estimate of how long (more) a job runs: ``seconds``, within ``low`` .. ``high``.
    ``source``: ``limit`` (its max_runtime_s), ``history`` (``samples`` similar past jobs)
    or ``default`` (no past job to go by)."""

    seconds: float
    low: float
    high: float
    source: str
    samples: int = 0


class RuntimeModel:
    """Runtimes of past jobs by similarity (see the module docstring). ``samples``: (team, gpu
    type, GPUs of the whole job, seconds the finished attempt ran)."""

    def __init__(
        self,
        samples: Iterable[tuple[str, str, int, float]],
        default_s: float = DEFAULT_RUNTIME_S,
    ) -> None:
        self.default_s = default_s
        levels: dict[tuple[object, ...], list[float]] = {}
        count = 0
        for team, gpu_type, gpus, seconds in samples:
            if seconds <= 0:
                continue
            count += 1
            for key in ((team, gpu_type, gpus), (team, gpu_type), (gpu_type,), ()):
                levels.setdefault(key, []).append(float(seconds))
        for values in levels.values():
            values.sort()
        self._levels = levels
        self.count = count
        self._memo: dict[tuple[str, str, int], list[float]] = {}

    def _similar(self, team: str, gpu_type: str, gpus: int) -> list[float]:
        key = (team, gpu_type, gpus)
        found = self._memo.get(key)
        if found is None:
            found = []
            for level in ((team, gpu_type, gpus), (team, gpu_type), (gpu_type,), ()):
                values = self._levels.get(level)
                if values is not None and len(values) >= MIN_SAMPLES:
                    found = values
                    break
            else:  # fewer than MIN_SAMPLES at every level: take what the widest has
                found = self._levels.get((), [])
            self._memo[key] = found
        return found

    def estimate(
        self, team: str, gpu_type: str, gpus: int, limit_s: float | None = None
    ) -> Runtime:
        """How long a job that starts now runs."""
        if limit_s is not None:
            return Runtime(limit_s, limit_s, limit_s, "limit")
        values = self._similar(team, gpu_type, gpus)
        if not values:
            d = self.default_s
            return Runtime(d, d / 4, d * 4, "default")
        return _spread(values, 0.0, len(values))

    def remaining(
        self, team: str, gpu_type: str, gpus: int, elapsed_s: float, limit_s: float | None = None
    ) -> Runtime:
        """How much longer a job that has run ``elapsed_s`` runs."""
        elapsed_s = max(0.0, elapsed_s)
        if limit_s is not None:
            left = max(0.0, limit_s - elapsed_s)
            return Runtime(left, left, left, "limit")
        values = self._similar(team, gpu_type, gpus)
        if not values:
            d = max(self.default_s, elapsed_s)
            return Runtime(d - elapsed_s, 0.0, 4 * d - elapsed_s, "default")
        longer = values[bisect.bisect_right(values, elapsed_s) :]
        if not longer:  # it outlived every similar job
            return Runtime(elapsed_s / 2, 0.0, elapsed_s, "history", len(values))
        return _spread(longer, elapsed_s, len(values), mean=False)


def _spread(values: Sequence[float], elapsed_s: float, samples: int, mean: bool = True) -> Runtime:
    """The estimate from sorted past runtimes, less ``elapsed_s``: their mean (else their
    median), within their 25th percentile and the larger of their 75th percentile and it."""
    center = sum(values) / len(values) if mean else percentile(values, 0.5)
    high = max(percentile(values, 0.75), center)
    return Runtime(
        center - elapsed_s,
        percentile(values, 0.25) - elapsed_s,
        high - elapsed_s,
        "history",
        samples,
    )


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (as ``sim.metrics``; kept here so the server
    that forecasts does not load the simulator's engine); 0 for no values."""
    if not sorted_values:
        return 0.0
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)
