"""One process's metrics: the registry, the scrape-time collector and the listener.

Metrics are served on an address of their own (``GPUPOOL_METRICS_ADDRESS``), not on the API:
Prometheus scrapes without a token, and the numbers (every team's queue and quota) are not a
tenant's to read, so the address is kept private (loopback, or a network only Prometheus
reaches). Every role serves them: a controller-only process has no API at all.

Which process says what (so that summing over processes counts nothing twice):

* the leading controller exports the state gauges (``catalog.STATE``), computed at scrape time
  from its last cycle (``gauges.py``); a standby or an API replica exports none;
* every process exports what it did (counters and histograms: its API requests, and its
  controller's cycles while it led) and what it is (``gpupool_process_role``; ``gpupool_leader``
  where a controller runs, with the lease's age on PostgreSQL).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from http.server import ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import MetricsHandler
from prometheus_client.registry import Collector
from starlette.types import ASGIApp

from gpupool.accounting.budgets import BudgetState
from gpupool.controller.leader import Leadership
from gpupool.server.metrics import catalog
from gpupool.server.metrics.catalog import MetricSpec
from gpupool.server.metrics.gauges import PendingCache, state_samples
from gpupool.server.metrics.recorder import ApiTimer, Recorder

log = logging.getLogger(__name__)


def gauge(spec: MetricSpec, samples: dict[tuple[str, ...], float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)
    for labels, value in sorted(samples.items()):
        family.add_metric(labels, value)
    return family


class StateCollector(Collector):
    """Builds the gauges when Prometheus scrapes (see the module docstring)."""

    def __init__(
        self,
        role: str,
        recorder: Recorder,
        leadership: Leadership | None,
        available: Callable[[str], bool],
        budgets: Callable[[], Sequence[BudgetState]] = lambda: (),
    ) -> None:
        self._budgets = budgets
        self._role = role
        self._recorder = recorder
        self._leadership = leadership
        self._available = available
        self._pending = PendingCache()

    def collect(self) -> Iterator[Metric]:
        yield gauge(catalog.ROLE, {(self._role,): 1})
        leadership = self._leadership
        if leadership is None:
            return
        leading = leadership.is_leader()
        yield gauge(catalog.LEADER, {(): float(leading)})
        lease = leadership.status().get("lease")
        if lease is not None:
            yield gauge(catalog.LEASE_AGE, {(): float(lease["age_s"])})
        published = self._recorder.latest
        if not leading or published is None:
            return
        pending = self._pending.counts(published)
        samples = state_samples(published.seen, published.admitted, self._available, pending)
        for spec in catalog.STATE:
            yield gauge(spec, samples[spec])
        used = {
            (state.team, state.name, state.budget.enforcement): state.used / state.limit
            for state in self._budgets()
            if state.limit > 0
        }
        yield gauge(catalog.BUDGET_USED, used)


class Metrics:
    """The registry of one process: the recorder (the controller's observer), the collector,
    the API timer and the HTTP listener."""

    def __init__(
        self,
        role: str,
        leadership: Leadership | None,
        available: Callable[[str], bool] = lambda _pool: True,
        budgets: Callable[[], Sequence[BudgetState]] = lambda: (),
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.recorder = Recorder(self.registry)
        self.registry.register(StateCollector(role, self.recorder, leadership, available, budgets))
        self._server: ThreadingHTTPServer | None = None

    def wrap(self, app: ASGIApp) -> ASGIApp:
        """``app`` with its requests timed (``gpupool_api_request_duration_seconds``)."""
        return ApiTimer(app, self.recorder.api)

    def serve(self, listener: socket.socket) -> None:
        """Answer scrapes on ``listener`` (bound already) from a thread, until :meth:`close`."""
        handler = MetricsHandler.factory(self.registry)
        server = _Server(listener, handler)
        self._server = server
        threading.Thread(target=server.serve_forever, name="gpupool-metrics", daemon=True).start()

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class _Server(ThreadingHTTPServer):
    """A threading HTTP server on a socket bound beforehand (a taken port is refused before
    the store is opened, like the API's)."""

    daemon_threads = True

    def __init__(self, listener: socket.socket, handler: Any) -> None:
        self.address_family = listener.family
        super().__init__(listener.getsockname()[:2], handler, bind_and_activate=False)
        self.socket.close()
        self.socket = listener
        self.server_address = listener.getsockname()[:2]
        self.socket.listen(16)
