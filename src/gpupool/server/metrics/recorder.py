"""Counters and histograms, updated where the events happen, and the last cycle for the gauges.

:class:`Recorder` is the controller's :class:`~gpupool.controller.observer.Observer`: the
controller calls it after each step and cycle and on each failed backend call. It keeps the
last cycle (:class:`~gpupool.server.metrics.gauges.Published`, immutable) for the scrape-time
gauges of ``gauges.py``, numbering the cycles and noting which decided each team.
:class:`ApiTimer` is the ASGI middleware that times API requests by route template.

Thread safety: prometheus_client's instruments are thread-safe; ``latest`` is replaced whole
(one reference assignment), never changed in place.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.controller.observer import CycleSeen, error_class
from gpupool.server.metrics import catalog
from gpupool.server.metrics.catalog import Kind, MetricSpec
from gpupool.server.metrics.gauges import AdmittedNow, Published

WITHIN_TEAM = "within_team"
IN_COHORT = "in_cohort"
UNMATCHED = "unmatched"  # a request no route matched: its path is never a label


def instrument(spec: MetricSpec, registry: CollectorRegistry) -> Any:
    """The prometheus_client instrument of a counter or histogram of the catalog."""
    if spec.kind is Kind.COUNTER:
        return Counter(spec.name, spec.help, spec.labels, registry=registry)
    if spec.kind is Kind.HISTOGRAM:
        return Histogram(spec.name, spec.help, spec.labels, registry=registry, buckets=spec.buckets)
    raise ValueError(f"{spec.name} is a {spec.kind}: gauges are collected at scrape time")


class Recorder:
    """The Prometheus observer of one controller (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.latest: Published | None = None
        self._cycles = 0
        self._decided: dict[str, int] = {}  # team -> the last cycle that decided it
        self._preempted = instrument(catalog.PREEMPTED, registry)
        self._evicted = instrument(catalog.EVICTED, registry)
        self._admissions = instrument(catalog.ADMISSIONS, registry)
        self._wait = instrument(catalog.ADMISSION_WAIT, registry)
        self._cycle = instrument(catalog.CYCLE, registry)
        self._step = instrument(catalog.STEP, registry)
        self._errors = instrument(catalog.BACKEND_ERRORS, registry)
        self.api = instrument(catalog.API, registry)

    def step(self, seconds: float) -> None:
        self._step.observe(seconds)

    def backend_error(self, pool: str, operation: str, error: BaseException) -> None:
        self._errors.labels(pool, operation, error_class(error)).inc()

    def evicted(self, pool: str) -> None:
        self._evicted.labels(pool).inc()

    def cycle(self, seen: CycleSeen) -> None:
        self._cycle.observe(seen.seconds)
        admitted = []
        for admission in seen.result.admissions:
            job = seen.job(admission.job_id)
            if job is None:  # cancelled while the cycle ran: the admission was dropped
                continue
            gpus = sum(len(p.devices) for p in admission.placements)
            admitted.append(
                AdmittedNow(admission.job_id, job.team, admission.gpu_type, admission.pool, gpus)
            )
            self._admissions.labels(job.team).inc()
            self._wait.labels(job.team).observe(max(0.0, seen.at - job.waiting_since))
        if seen.result.preemptions:
            victims = {p.job_id for p in seen.result.preemptions}
            team_of = {j.id: j.team for j in seen.snapshot.running if j.id in victims}
            for preemption in seen.result.preemptions:
                preemptor = seen.job(preemption.preemptor_id)
                if preemptor is None:
                    continue
                same = team_of.get(preemption.job_id) == preemptor.team
                self._preempted.labels(preemptor.team, WITHIN_TEAM if same else IN_COHORT).inc()
        self._cycles += 1
        decided = dict(self._decided)
        for team in seen.queued:
            if team not in seen.parked:
                decided[team] = self._cycles
        self._decided = decided
        self.latest = Published(seen, tuple(admitted), self._cycles, decided)


class ApiTimer:
    """ASGI middleware: each HTTP request's duration by method, route template and status.

    The route is read after the application ran (the router records the matched route in the
    request's scope), so ``/v1/jobs/{job_id}`` is one label value whatever the id.
    """

    def __init__(
        self, app: ASGIApp, histogram: Any, clock: Callable[[], float] = time.perf_counter
    ):
        self.app = app
        self._histogram = histogram
        self._clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = self._clock()
        status = 500  # an exception that escapes is answered 500 by the server

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", None) or UNMATCHED
            self._histogram.labels(scope["method"], route, str(status)).observe(
                self._clock() - began
            )
