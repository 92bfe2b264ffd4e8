"""What a queued job waits for and when it is expected to start, for ``why``.

The forecast (:mod:`gpupool.sim.estimate`) starts from the controller's last cycle as the
controller saw it (``Controller.last_cycle``: the snapshot, every team's queue), and the
runtimes of past jobs from the store (``state.history``). A job's forecast is made at most once
per controller cycle and kept until the next one, so asking again costs a lookup; making one is
bounded by the forward run's limits and by ``budget_s`` of the asking thread's CPU time (a run
cut short leaves the jobs it had not started without a start, and says so).

Visibility: a caller reads the job (its team), so the jobs ahead of it in its team's queue are
named; of the running and queued jobs of other teams it waits for, only those of teams the
caller may read are named, the others are counted.

Invariant: nothing here writes; a server whose controller does not lead (a standby, an API
replica) answers without an estimate and says why.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from gpupool.auth.principal import Action, Principal
from gpupool.controller.observer import CycleSeen
from gpupool.controller.snapshot import policy_for
from gpupool.scheduler import RunningJob
from gpupool.server.schemas import BlockerOut, EstimateOut, ReasonOut
from gpupool.sim.estimate import Forecast, forecast
from gpupool.sim.forecast import Limits
from gpupool.sim.runtimes import RuntimeModel
from gpupool.spec.models import ClusterConfig
from gpupool.state import history
from gpupool.state.db import SessionFactory

HISTORY_DAYS = 90  # past attempts the runtime estimates draw on
NAMED = 20  # at most this many job ids per entry of waits_for
QUOTA_CODES = ("quota", "cohort", "budget")
# CPU time of the asking thread one job's forecast may take (its three forward runs together):
# CPU, not wall, time, so that a busy machine does not make forecasts shorter-sighted.
BUDGET_S = 2.0


class ForecastService:
    def __init__(
        self,
        sessions: SessionFactory,
        config: Callable[[], ClusterConfig],
        last_cycle: Callable[[], CycleSeen | None],
        limits: Limits = Limits(),
        budget_s: float = BUDGET_S,
        cpu_time: Callable[[], float] = time.thread_time,
    ) -> None:
        self._sessions = sessions
        self._config = config
        self._last_cycle = last_cycle
        self.limits = limits
        self.budget_s = budget_s
        self._cpu_time = cpu_time
        self._lock = threading.Lock()
        self._seen: CycleSeen | None = None
        self._model: RuntimeModel | None = None
        self._model_at = 0.0  # the cycle time the past runtimes were read at
        self._made: dict[str, Forecast | None] = {}
        self._running: dict[str, RunningJob] = {}
        self._team_of: dict[str, str] = {}

    def forecast(self, job_id: str) -> tuple[Forecast | None, CycleSeen | None]:
        """The job's forecast from the last cycle (None, None: no cycle to start from; a
        forecast of None: the job was not queued in that cycle)."""
        seen = self._last_cycle()
        if seen is None:
            return None, None
        with self._lock:  # one forecast at a time: a burst of whys costs one core
            if seen is not self._seen:
                self._refresh(seen)
            if job_id not in self._made:
                self._made[job_id] = self._make(seen, job_id)
            return self._made[job_id], seen

    def _refresh(self, seen: CycleSeen) -> None:
        self._seen = seen
        self._made = {}
        self._running = {job.id: job for job in seen.snapshot.running}
        self._team_of = {job.id: job.team for jobs in seen.queued.values() for job in jobs}
        if self._model is None or self._model_due(seen):
            since = datetime.fromtimestamp(seen.at, UTC) - timedelta(days=HISTORY_DAYS)
            with self._sessions() as session:
                self._model = RuntimeModel(history.runtime_samples(session, since))
            self._model_at = seen.at

    def _model_due(self, seen: CycleSeen) -> bool:
        """Past runtimes are read again at most once a minute: they change slowly."""
        return seen.at - self._model_at >= 60.0

    def _make(self, seen: CycleSeen, job_id: str) -> Forecast | None:
        if job_id not in self._team_of:
            return None
        assert self._model is not None
        deadline = self._cpu_time() + self.budget_s
        return forecast(
            seen.snapshot,
            seen.queued,
            policy_for(self._config()),
            self._model,
            targets=(job_id,),
            limits=self.limits,
            stop=lambda: self._cpu_time() > deadline,
        ).of(job_id)

    # -- the answer ------------------------------------------------------------------------

    def estimate(self, found: Forecast | None, seen: CycleSeen | None) -> EstimateOut:
        if seen is None:
            return EstimateOut(
                basis="no forecast: this server's controller does not lead (or has not run a "
                "cycle yet); ask the server that schedules"
            )
        at = _time(seen.at)
        if found is None:
            return EstimateOut(
                basis="the scheduler has not considered it yet: ask again after its next cycle",
                forecast_at=at,
            )
        return EstimateOut(
            start_at=_time(found.start),
            earliest=_time(found.earliest),
            latest=_time(found.latest),
            pool=found.pool,
            gpu_type=found.gpu_type,
            method=found.method,
            basis=found.basis,
            forecast_at=at,
        )

    def waits_for(
        self,
        principal: Principal,
        team: str,
        position: int,
        reasons: Sequence[ReasonOut],
        found: Forecast | None,
        seen: CycleSeen | None,
    ) -> list[BlockerOut]:
        out = []
        if position > 1:
            ahead = []
            if seen is not None:
                ahead = [job.id for job in seen.queued.get(team, ())][: min(position - 1, NAMED)]
            out.append(
                BlockerOut(
                    kind="queue",
                    message=f"{position - 1} job(s) of {team} ahead of it in the queue",
                    count=position - 1,
                    jobs=ahead,
                )
            )
        for reason in reasons:
            if reason.code in QUOTA_CODES:
                out.append(
                    BlockerOut(kind="quota", message=reason.message, gpu_type=reason.gpu_type)
                )
        if found is None or found.start is None:
            return out
        running = [self._running[j] for j in found.waits_for if j in self._running]
        if running:
            gpus = sum(job.gpus for job in running)
            out.append(
                BlockerOut(
                    kind="running",
                    message=f"{len(running)} running job(s) holding {gpus} GPUs on {found.pool} "
                    f"end first{_others(principal, [j.team for j in running])}",
                    count=len(running),
                    gpus=gpus,
                    gpu_type=found.gpu_type,
                    jobs=_named(principal, [(j.id, j.team) for j in running]),
                )
            )
        others = [(j, self._team_of.get(j, "")) for j in found.ahead]
        others = [(j, t) for j, t in others if t != team]
        if others:
            out.append(
                BlockerOut(
                    kind="queued",
                    message=f"{len(others)} queued job(s) of other teams are forecast to start "
                    f"before it{_others(principal, [t for _, t in others])}",
                    count=len(others),
                    jobs=_named(principal, others),
                )
            )
        return out


def _named(principal: Principal, jobs: list[tuple[str, str]]) -> list[str]:
    return [j for j, t in jobs if principal.can(Action.READ, t)][:NAMED]


def _others(principal: Principal, teams: list[str]) -> str:
    hidden = sum(1 for t in teams if not principal.can(Action.READ, t))
    return f" ({hidden} of teams you cannot see)" if hidden else ""


def _time(at: float | None) -> datetime | None:
    return None if at is None else datetime.fromtimestamp(at, UTC)
