"""The simulated backend: jobs "run" on an injected clock, nothing is executed.

Used by tests, by the demo without processes and by the simulator (P5), which drives the
production scheduler and controller against it on a virtual clock. It keeps the full backend
contract, so the contract suite runs against it too:

* ``submit`` is idempotent on the key; the runs live in a :class:`FakeCluster` (the
  "external system"), which outlives any adapter instance the way a real cluster outlives a
  control-plane restart. Share one cluster (pool option ``cluster``) to simulate a restart.
* A job is PENDING for ``GPUPOOL_FAKE_PENDING_S``, then RUNNING for
  ``GPUPOOL_FAKE_DURATION_S`` (default 0), then ends with ``GPUPOOL_FAKE_EXIT_CODE``
  (default 0). These are read from the job's ``env``. ``max_runtime_s`` ends it as FAILED
  with the local backend's message. ``cancel`` ends it as CANCELLED at once.
* The job "sees" the contract environment; :meth:`FakeCluster.run` exposes it for tests.

Pool options: ``clock`` (a callable returning seconds) and ``cluster`` (a FakeCluster).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gpupool.backends.base import (
    AdapterContext,
    BackendStatus,
    Capability,
    JobHandle,
    JobSpec,
    LogChunk,
    RunState,
    contract_env,
)
from gpupool.backends.errors import BackendMisconfigured, BackendRejected

Clock = Callable[[], float]

DURATION_ENV = "GPUPOOL_FAKE_DURATION_S"
PENDING_ENV = "GPUPOOL_FAKE_PENDING_S"
EXIT_CODE_ENV = "GPUPOOL_FAKE_EXIT_CODE"


@dataclass
class FakeRun:
    """One attempt in the fake cluster. Times are on the cluster's clock."""

    spec: JobSpec
    submitted_at: float
    env: dict[str, str]
    pending_s: float
    duration_s: float
    exit_code: int
    cancelled_at: float | None = None
    signals: list[str] = field(default_factory=list)  # what the job "received"

    @property
    def starts_at(self) -> float:
        return self.submitted_at + self.pending_s

    def status(self, now: float) -> BackendStatus:
        if self.cancelled_at is not None:  # only ever set while the run was not final
            return BackendStatus(RunState.CANCELLED, message="cancelled")
        limit = self.spec.max_runtime_s
        end = self.starts_at + self.duration_s
        if now < self.starts_at:
            return BackendStatus(RunState.PENDING)
        if limit is not None and self.duration_s > limit and now >= self.starts_at + limit:
            return BackendStatus(RunState.FAILED, message=f"exceeded max_runtime_s={limit}")
        if now < end:
            return BackendStatus(RunState.RUNNING)
        if self.exit_code == 0:
            return BackendStatus(RunState.SUCCEEDED, exit_code=0)
        return BackendStatus(
            RunState.FAILED, exit_code=self.exit_code, message=f"exited with code {self.exit_code}"
        )


class FakeCluster:
    """The simulated execution system: runs by key, on one clock. Thread-safe."""

    def __init__(self, clock: Clock = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._runs: dict[str, FakeRun] = {}

    def run(self, key: str) -> FakeRun | None:
        with self._lock:
            return self._runs.get(key)

    def start(self, spec: JobSpec, env: dict[str, str]) -> FakeRun:
        """The run for ``spec.key``: the existing one, or a new one (exactly one per key)."""
        try:
            pending = float(spec.env.get(PENDING_ENV, "0"))
            duration = float(spec.env.get(DURATION_ENV, "0"))
            exit_code = int(spec.env.get(EXIT_CODE_ENV, "0"))
        except ValueError as exc:
            raise BackendRejected(f"invalid fake job setting: {exc}") from exc
        with self._lock:
            found = self._runs.get(spec.key)
            if found is None:
                found = FakeRun(spec, self.clock(), env, pending, duration, exit_code)
                self._runs[spec.key] = found
            return found

    def cancel(self, key: str) -> None:
        with self._lock:
            found = self._runs.get(key)
            if found is None or found.cancelled_at is not None:
                return
            now = self.clock()
            if found.status(now).state in (RunState.PENDING, RunState.RUNNING):
                found.cancelled_at = now
                if now >= found.starts_at:
                    found.signals.append("SIGTERM")


class FakeBackend:
    name = "fake"
    capabilities = frozenset({Capability.GANG, Capability.LOG_STREAM})

    def __init__(self, ctx: AdapterContext, *, cluster: FakeCluster | None = None) -> None:
        self.ctx = ctx
        given = cluster if cluster is not None else ctx.options.get("cluster")
        if given is None:
            clock = ctx.options.get("clock", time.monotonic)
            if not callable(clock):
                raise BackendMisconfigured("fake pool option clock must be a callable")
            given = FakeCluster(clock)
        if not isinstance(given, FakeCluster):
            raise BackendMisconfigured("fake pool option cluster must be a FakeCluster")
        self.cluster = given

    def close(self) -> None:
        """Nothing to release."""

    def submit(self, spec: JobSpec) -> JobHandle:
        if not spec.command:
            raise BackendRejected("the job has no command")
        base = f"/fake/{self.ctx.pool}/{spec.key}"
        env = contract_env(spec, f"{base}/work", f"{base}/inputs", f"{base}/outputs")
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in (spec.devices or ((),))[0])
        self.cluster.start(spec, env)
        return JobHandle(
            backend=self.name, pool=self.ctx.pool, provider_id=spec.key, key=spec.key, data={}
        )

    def find(self, key: str) -> JobHandle | None:
        if self.cluster.run(key) is None:
            return None
        return JobHandle(backend=self.name, pool=self.ctx.pool, provider_id=key, key=key, data={})

    def poll(self, handles: Sequence[JobHandle]) -> Mapping[str, BackendStatus]:
        now = self.cluster.clock()
        out = {}
        for handle in handles:
            found = self.cluster.run(handle.key)
            out[handle.key] = (
                found.status(now)
                if found is not None
                else BackendStatus(RunState.LOST, message="no such run in the fake cluster")
            )
        return out

    def logs(self, handle: JobHandle, offset: int = 0) -> LogChunk:
        found = self.cluster.run(handle.key)
        if found is None:
            return LogChunk(b"", max(0, offset), complete=True)
        status = found.status(self.cluster.clock())
        started = status.state != RunState.PENDING
        text = f"hello from {handle.key}\n".encode() if started else b""
        data = text[max(0, offset) :]
        return LogChunk(
            data=data,
            next_offset=max(offset, len(text)),
            complete=status.state not in (RunState.PENDING, RunState.RUNNING),
        )

    def cancel(self, handle: JobHandle, grace_s: float) -> None:
        self.cluster.cancel(handle.key)
