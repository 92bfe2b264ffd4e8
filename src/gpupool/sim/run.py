"""A whole ``gpupool simulate`` run: read the inputs, simulate each policy, write the outputs.

Kept apart from the CLI so tests and notebooks can call it: :func:`prepare` checks every input
before any policy runs (a typo in a policy name must not cost the first policy's minutes).
"""

from __future__ import annotations

import math
import multiprocessing
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from queue import Empty
from typing import Any

from gpupool.sim.accuracy import accuracy, attach, rows
from gpupool.sim.budgets import DEFAULT_ORIGIN
from gpupool.sim.cluster import (
    DEFAULT_IDLE_TIMEOUT_S,
    DEFAULT_PROVISION_DELAY_S,
    POLICIES,
    SCALINGS,
    ClusterError,
    PolicySetup,
    philly_config,
    policy_setup,
    priced,
    read_philly_vcs,
    scale_config,
    scaled,
)
from gpupool.sim.compare import BASELINES, compare
from gpupool.sim.engine import Outcome, Simulation
from gpupool.sim.metrics import summarize
from gpupool.sim.report import write_forecasts, write_jobs, write_metrics, write_report
from gpupool.sim.trace import RowProblem, Trace, TraceJob, load_trace
from gpupool.spec.models import ClusterConfig


@dataclass
class Request:
    trace: Path
    trace_format: str = "generic"
    config: Path | None = None
    philly_vcs: Path | None = None
    capacity_scale: float = 1.0
    policies: list[str] = field(default_factory=lambda: list(POLICIES))
    out: Path = Path("sim-out")
    seed: int = 0
    sample: float = 1.0
    limit: int | None = None
    strict: bool = False
    since: datetime | None = None  # keep jobs submitted at or after (traces with wall times)
    until: datetime | None = None  # ... and before
    dedicated_pools: bool = False  # Philly: one pool per VC, as when each VC is its own cluster
    baselines: bool = True  # add hard-quota-fifo and fifo when not asked: the comparisons need them
    forecast_sample: int = 0  # forecast this many drawn jobs at their submit (sim.accuracy)
    # How the pools are sized (sim.cluster.SCALINGS): each asked policy runs once per scaling;
    # the baselines run as configured.
    scalings: list[str] = field(default_factory=lambda: ["configured"])
    provision_delay_s: float = DEFAULT_PROVISION_DELAY_S
    idle_timeout_s: int = DEFAULT_IDLE_TIMEOUT_S
    price_per_gpu_hour: float | None = None  # every gpu type's, when given
    spot_price_per_gpu_hour: float | None = None
    spot_evictions_per_node_day: float = 0.0  # 0: spot nodes are never taken back


@dataclass
class Prepared:
    jobs: list[TraceJob]
    problems: list[RowProblem]
    config: ClusterConfig
    setups: list[PolicySetup]
    nominal: dict[str, int]
    # Where virtual time 0 lies (budget periods are cut from it): the trace's start when its
    # submit times are wall-clock times.
    origin: datetime = DEFAULT_ORIGIN
    forecast_sample: int = 0
    spot_evictions_per_node_day: float = 0.0
    seed: int = 0


class SimulationError(ValueError):
    """Inputs that cannot be simulated; the message names the input and the fix."""


def prepare(request: Request) -> Prepared:
    unknown = [p for p in request.policies if p not in POLICIES]
    if unknown:
        raise SimulationError(
            f"unknown --policy {', '.join(unknown)}: use any of {', '.join(POLICIES)}"
        )
    if request.forecast_sample < 0:
        raise SimulationError(f"--forecast-sample must be 0 or more, got {request.forecast_sample}")
    if not 0 < request.sample <= 1:
        raise SimulationError(f"--sample must be in (0, 1], got {request.sample}")
    if (request.config is None) == (request.philly_vcs is None):
        raise SimulationError("give exactly one of --config FILE and --philly-vcs FILE")
    trace = load_trace(request.trace, request.trace_format)
    if request.strict and trace.problems:
        raise SimulationError(
            f"{request.trace}: {len(trace.problems)} bad rows (--strict), first: "
            f"{trace.problems[0]}"
        )
    jobs = _window(trace, request)
    if request.sample < 1:
        rng = random.Random(request.seed)
        jobs = [j for j in jobs if rng.random() < request.sample]
    if request.limit is not None:
        jobs = jobs[: request.limit]
    if not jobs:
        raise SimulationError(f"{request.trace} has no job to simulate")
    try:
        if request.philly_vcs is not None:
            vcs = read_philly_vcs(request.philly_vcs)
            config = philly_config(
                vcs, {j.team for j in jobs}, request.capacity_scale, request.dedicated_pools
            )
        else:
            from gpupool.spec.load import load_config

            assert request.config is not None
            config = scale_config(load_config(request.config), request.capacity_scale)
        config = priced(config, request.price_per_gpu_hour, request.spot_price_per_gpu_hour)
        setups = _setups(config, request)
    except ClusterError as exc:
        raise SimulationError(str(exc)) from exc
    nominal = {
        name: sum(q.nominal for q in team.quota.values()) for name, team in config.teams.items()
    }
    origin = trace.start or DEFAULT_ORIGIN
    if request.spot_evictions_per_node_day < 0:
        raise SimulationError(
            f"--spot-evictions-per-node-day must be >= 0, got {request.spot_evictions_per_node_day}"
        )
    return Prepared(
        jobs,
        trace.problems,
        config,
        setups,
        nominal,
        origin,
        request.forecast_sample,
        request.spot_evictions_per_node_day,
        request.seed,
    )


def _setups(config: ClusterConfig, request: Request) -> list[PolicySetup]:
    """Each asked policy once per scaling (named ``<policy>/<scaling>`` unless configured),
    then the baselines not asked for, as configured."""
    unknown = [s for s in request.scalings if s not in SCALINGS]
    if unknown:
        raise ClusterError(
            f"unknown --scaling {', '.join(unknown)}: use any of {', '.join(SCALINGS)}"
        )
    setups = []
    asked = list(dict.fromkeys(request.policies))
    for name in policies(request):
        for scaling in dict.fromkeys(request.scalings) if name in asked else ["configured"]:
            sized = scaled(config, scaling, request.provision_delay_s, request.idle_timeout_s)
            setup = policy_setup(sized, name)
            if scaling != "configured":
                setup = PolicySetup(f"{name}/{scaling}", setup.config, setup.team_of)
            setups.append(setup)
    return setups


def policies(request: Request) -> list[str]:
    """The policies to run: those asked, once each, then the baselines not asked for (unless
    ``baselines`` is off): the sharing incentive and the targets compare with them."""
    asked = list(dict.fromkeys(request.policies))
    if not request.baselines:
        return asked
    return [*asked, *(name for name in BASELINES if name not in asked)]


def _window(trace: Trace, request: Request) -> list[TraceJob]:
    if request.since is None and request.until is None:
        return trace.jobs
    if trace.start is None:
        raise SimulationError("--since/--until need a trace with wall-clock submit times")
    start = trace.start
    low = -math.inf if request.since is None else (_aware(request.since) - start).total_seconds()
    high = math.inf if request.until is None else (_aware(request.until) - start).total_seconds()
    return [j for j in trace.jobs if low <= j.submit_s < high]


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def simulate_all(
    prepared: Prepared,
    progress: Callable[[str, int, int], None] | None = None,
    workers: int = 1,
) -> tuple[dict[str, Any], list[Outcome]]:
    """Each policy, in turn or in ``workers`` processes at once (each policy is one
    deterministic, single-threaded run, so the results do not depend on ``workers``);
    ``progress(policy, jobs done, jobs)`` as they go, every 1/``PROGRESS_STEPS`` of the jobs."""
    total = len(prepared.jobs)
    if workers > 1 and len(prepared.setups) > 1:
        outcomes = _in_processes(prepared, progress, workers)
    else:
        outcomes = []
        for setup in prepared.setups:
            report = None if progress is None else _throttled(progress, setup.name, total)
            outcomes.append(_replay(prepared, setup, report))
    metrics = {outcome.policy: summarize(outcome) for outcome in outcomes}
    for outcome in outcomes:
        if outcome.forecast is not None:
            metrics[outcome.policy]["forecast"] = outcome.forecast
    compare(metrics, outcomes)
    return metrics, outcomes


def _replay(
    prepared: Prepared, setup: PolicySetup, report: Callable[[int], None] | None
) -> Outcome:
    """One policy's replay; with ``forecast_sample``, its forecasts' accuracy in the outcome."""
    simulation = _simulation(prepared, setup)
    sampler = attach(simulation, prepared.forecast_sample, prepared.seed)
    outcome = simulation.run(report)
    if sampler is not None:
        outcome.forecast = accuracy(sampler, outcome)
        outcome.forecast_rows = rows(sampler, outcome)
    return outcome


def _simulation(prepared: Prepared, setup: PolicySetup) -> Simulation:
    return Simulation(
        setup,
        prepared.jobs,
        prepared.nominal,
        prepared.origin,
        prepared.spot_evictions_per_node_day,
        prepared.seed,
    )


# What forked workers read: set just before the fork, so nothing (lambdas included) is pickled
# on the way in; only the outcomes come back.
_SHARED: dict[str, Any] = {}


def _run_one(index: int) -> Outcome:
    prepared: Prepared = _SHARED["prepared"]
    queue = _SHARED["queue"]
    setup = prepared.setups[index]
    report = _throttled(
        lambda name, done, _: queue.put((name, done)), setup.name, len(prepared.jobs)
    )
    return _replay(prepared, setup, report)


def _in_processes(
    prepared: Prepared, progress: Callable[[str, int, int], None] | None, workers: int
) -> list[Outcome]:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    _SHARED.update(prepared=prepared, queue=queue)
    try:
        with context.Pool(min(workers, len(prepared.setups))) as pool:
            pending = pool.map_async(_run_one, range(len(prepared.setups)))
            while not pending.ready():
                try:
                    name, done = queue.get(timeout=0.2)
                except Empty:
                    continue
                if progress is not None:
                    progress(name, done, len(prepared.jobs))
            return list(pending.get())
    finally:
        _SHARED.clear()


PROGRESS_STEPS = 500


def _throttled(
    progress: Callable[[str, int, int], None], name: str, total: int
) -> Callable[[int], None]:
    """``progress`` for one policy, called every 1/``PROGRESS_STEPS`` of the jobs and at the
    end: the engine reports every event, and redrawing (or queueing) each would cost more than
    the simulation."""
    step, last = max(1, total // PROGRESS_STEPS), [0]

    def report(done: int) -> None:
        if done - last[0] >= step or done == total:
            last[0] = done
            progress(name, done, total)

    return report


def write_outputs(
    out: Path, metrics: dict[str, Any], outcomes: list[Outcome], title: str
) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [
        write_metrics(out, metrics),
        write_jobs(out, outcomes),
        write_report(out, metrics, outcomes, title),
    ]
    if any(outcome.forecast_rows for outcome in outcomes):
        written.append(write_forecasts(out, outcomes))
    return written
