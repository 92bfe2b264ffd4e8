"""How good the start-time forecast is: measured during a replay (``--forecast-sample N``).

N jobs of the trace are drawn (seeded, among those that can ever run). When each arrives, the
replay stops for a moment and forecasts it exactly as the server would (``sim.estimate``), from
the replay's state at that instant: the running jobs (whose trace durations the forecast does
not know: it estimates them from the replay's finished jobs, as the server does from the
store's), the queues, the quotas and the policy. The replay then goes on, and the forecast is
compared with the job's simulated first start. The error includes everything a real forecast
cannot know: the jobs submitted after it.

``metrics.json`` gets a ``forecast`` block per policy:

``sampled``, ``started``           jobs forecast, and those of them that started in the replay
``beyond_horizon``                 forecast not to start within the horizon (no error counted)
``median_abs_error_s``, ``p90_abs_error_s``   over the jobs with both a forecast and a start
``median_error_s``                 signed (forecast - actual): above 0, forecasts are late
``within_range``                   share of started jobs whose start lay in the forecast's range
``median_wait_s``                  the same jobs' median actual wait, to size the error against
``waited``, ``waited_median_abs_error_s``, ``waited_p90_abs_error_s``   the same over the jobs
                                   that waited at least a minute (most jobs of a trace start at
                                   once, and are forecast to: they make the overall median 0)
``waited_median_error_s``, ``waited_median_wait_s``   their signed error and their wait
``beyond_started_within_horizon``  of the jobs forecast beyond the horizon, those that did
                                   start within it (the forward run was cut short)
``median_forecast_ms``, ``p90_forecast_ms``   wall time of one forecast (three forward runs)
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from gpupool.sim.engine import JobRecord, Outcome, Simulation
from gpupool.sim.estimate import Forecast, forecast
from gpupool.sim.forecast import Limits
from gpupool.sim.runtimes import RuntimeModel, percentile

# A replay's forecasts look as far ahead as the server's (sim.forecast.Limits), without its
# budget of wall time (a replay's numbers must not depend on the machine's load).
SIM_LIMITS = Limits()
WAITED_S = 60.0


@dataclass(slots=True)
class Sampler:
    """Forecasts the drawn jobs of one replay as they arrive."""

    simulation: Simulation
    ids: frozenset[str]
    limits: Limits = SIM_LIMITS
    made: dict[str, Forecast] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)

    def __call__(self, record: JobRecord) -> None:
        job_id = record.trace.job_id
        if job_id not in self.ids:
            return
        began = time.perf_counter()
        snapshot, groups = self.simulation.snapshot_now()
        model = RuntimeModel(self.simulation.finished)
        found = forecast(
            snapshot,
            groups,
            self.simulation.policy,
            model,
            targets=(job_id,),
            limits=self.limits,
        ).of(job_id)
        self.seconds.append(time.perf_counter() - began)
        if found is not None:
            self.made[job_id] = found


def draw(simulation: Simulation, count: int, seed: int) -> frozenset[str]:
    """``count`` jobs of the replay that can ever run, drawn with ``seed``."""
    runnable = sorted(r.trace.job_id for r in simulation.records if not r.unschedulable)
    if count >= len(runnable):
        return frozenset(runnable)
    return frozenset(random.Random(seed).sample(runnable, count))


def attach(simulation: Simulation, count: int, seed: int) -> Sampler | None:
    """Make ``simulation`` forecast ``count`` drawn jobs as they arrive (None: count is 0)."""
    if count <= 0:
        return None
    sampler = Sampler(simulation, draw(simulation, count, seed))
    simulation.on_arrival = sampler
    return sampler


def accuracy(sampler: Sampler, outcome: Outcome) -> dict[str, Any]:
    """The ``forecast`` block of ``metrics.json`` (see the module docstring)."""
    by_id = {r.trace.job_id: r for r in outcome.jobs}
    errors: list[float] = []
    signed: list[float] = []
    waits: list[float] = []
    inside = beyond = missed = started = 0
    waited: list[float] = []
    waited_signed: list[float] = []
    waited_waits: list[float] = []
    for job_id, made in sorted(sampler.made.items()):
        record = by_id[job_id]
        if record.first_start is None:
            continue
        started += 1
        actual = record.first_start
        if made.start is None:
            beyond += 1
            missed += actual <= made.until
            continue
        errors.append(abs(made.start - actual))
        signed.append(made.start - actual)
        waits.append(actual - record.trace.submit_s)
        if actual - record.trace.submit_s >= WAITED_S:
            waited.append(abs(made.start - actual))
            waited_signed.append(made.start - actual)
            waited_waits.append(actual - record.trace.submit_s)
        low = made.earliest if made.earliest is not None else made.start
        high = made.latest if made.latest is not None else made.start
        inside += low - 1.0 <= actual <= high + 1.0
    errors.sort()
    waited_signed.sort()
    waited_waits.sort()
    waited.sort()
    signed.sort()
    waits.sort()
    spent = sorted(s * 1000 for s in sampler.seconds)
    return {
        "sampled": len(sampler.ids),
        "forecast": len(sampler.made),
        "started": started,
        "beyond_horizon": beyond,
        "median_abs_error_s": percentile(errors, 0.5),
        "p90_abs_error_s": percentile(errors, 0.9),
        "median_error_s": percentile(signed, 0.5),
        "within_range": inside / len(errors) if errors else 0.0,
        "median_wait_s": percentile(waits, 0.5),
        "waited": len(waited),
        "waited_median_abs_error_s": percentile(waited, 0.5),
        "waited_p90_abs_error_s": percentile(waited, 0.9),
        "waited_median_error_s": percentile(waited_signed, 0.5),
        "waited_median_wait_s": percentile(waited_waits, 0.5),
        "beyond_started_within_horizon": missed,
        "median_forecast_ms": percentile(spent, 0.5),
        "p90_forecast_ms": percentile(spent, 0.9),
        "horizon_s": sampler.limits.horizon_s,
        "max_cycles": sampler.limits.max_cycles,
    }


def rows(sampler: Sampler, outcome: Outcome) -> list[dict[str, Any]]:
    """One row per forecast job (``forecasts.csv``): its forecast beside its simulated start."""
    by_id = {r.trace.job_id: r for r in outcome.jobs}
    out = []
    for job_id, made in sorted(sampler.made.items()):
        record = by_id[job_id]
        out.append(
            {
                "job_id": job_id,
                "team": record.trace.team,
                "gpus": record.shape.total,
                "submit_s": record.trace.submit_s,
                "forecast_start_s": made.start,
                "earliest_s": made.earliest,
                "latest_s": made.latest,
                "actual_start_s": record.first_start,
                "method": made.method,
            }
        )
    return out
