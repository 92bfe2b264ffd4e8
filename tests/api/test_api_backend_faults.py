"""X1/X3 under faults: an unreachable backend is retried with backoff; nothing is lost or
run twice, and the API keeps serving meanwhile."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from gpupool.backends.base import (
    Backend,
    BackendStatus,
    Capability,
    JobHandle,
    JobSpec,
    LogChunk,
    PoolCapacity,
)
from gpupool.backends.errors import BackendUnavailable
from support.apikit import Api

wrapped_pool = "demo-shared-dev-h100-pool"


class Flaky:
    """Wraps a real backend; while ``down`` every call fails as an unreachable system."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.capabilities = inner.capabilities
        self.down = True
        self.submits = 0

    def _check(self) -> None:
        if self.down:
            raise BackendUnavailable("connection refused (test outage)")

    def submit(self, spec: JobSpec) -> JobHandle:
        self.submits += 1
        self._check()
        return self.inner.submit(spec)

    def poll(self, handles: Sequence[JobHandle]) -> Mapping[str, BackendStatus]:
        self._check()
        return self.inner.poll(handles)

    def logs(self, handle: JobHandle, offset: int = 0) -> LogChunk:
        self._check()
        return self.inner.logs(handle, offset)

    def cancel(self, handle: JobHandle, grace_s: float) -> None:
        self._check()
        self.inner.cancel(handle, grace_s)


@pytest.fixture
def flaky(api: Api, monkeypatch: pytest.MonkeyPatch) -> Flaky:
    registry = api.runtime.execution._registry
    wrapped = Flaky(registry.get("demo-shared-dev-h100-pool"))
    real_get = registry.get
    monkeypatch.setattr(
        registry, "get", lambda pool: wrapped if pool == wrapped_pool else real_get(pool)
    )
    return wrapped


def test_outage_during_submission_is_retried_with_backoff(
    api: Api, flaky: Flaky, open_dir: Path
) -> None:
    runs = open_dir / "runs"
    job = api.submit(
        "alice",
        command=["sh", "-c", f'echo "$GPUPOOL_ATTEMPT" >> {runs}'],
        resources={"gpus": 1, "gpu_types": ["h100"]},
    )["id"]
    api.tick_until(lambda: flaky.submits >= 1, what="a first submit")
    for _ in range(10):  # a second of ticks: the 1 s backoff holds further submits
        api.runtime.controller.tick()
    assert flaky.submits <= 2
    detail = api.job("alice", job)
    assert detail["status"] == "admitted" and detail["attempt"] == 1  # kept, not churned
    assert "will retry" in detail["attempts"][0]["message"]
    pools = api.client.get("/v1/pools", headers=api.as_("alice")).json()["items"]
    h100 = next(p for p in pools if p["name"] == wrapped_pool)
    assert h100["available"] is False and "connection refused" in h100["message"]
    assert api.client.get("/v1/jobs", headers=api.as_("alice")).status_code == 200
    why = api.client.get(f"/v1/jobs/{job}/why", headers=api.as_("alice")).json()["summary"]
    assert why.startswith(f"admitted on {wrapped_pool}, whose backend cannot be reached: ")
    assert "connection refused" in why and "tried again in" in why

    flaky.down = False
    api.tick_until(lambda: api.status(job) == "succeeded", timeout=20, what="job runs")
    assert runs.read_text().split() == ["1"]  # one attempt, run once
    pools = api.client.get("/v1/pools", headers=api.as_("alice")).json()["items"]
    assert next(p for p in pools if p["name"] == wrapped_pool)["available"] is True


def test_outage_while_running_keeps_the_job(api: Api, flaky: Flaky, open_dir: Path) -> None:
    flaky.down = False
    release = open_dir / "release"
    job = api.submit(
        "alice",
        command=["sh", "-c", f"while [ ! -f {release} ]; do sleep 0.05; done"],
        resources={"gpus": 1, "gpu_types": ["h100"]},
    )["id"]
    api.tick_until(lambda: api.status(job) == "running", what="running")
    # A poll already under way (it may wait up to poll_wait_s for news) would see the end.
    api.runtime.controller.wait_backend_calls()
    flaky.down = True
    release.touch()
    for _ in range(10):
        api.runtime.controller.tick()
    assert api.status(job) == "running"  # unknown while unreachable: not lost, not requeued
    flaky.down = False
    api.tick_until(lambda: api.status(job) == "succeeded", timeout=20, what="seen to finish")
    assert api.job("alice", job)["attempt"] == 1


class Probed(Flaky):
    """A backend that reports its pool's capacity: what the controller's probes ask."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.capabilities = inner.capabilities | {Capability.CAPACITY}
        self.asked = 0

    def pool_capacity(self) -> PoolCapacity:
        self.asked += 1
        self._check()
        return PoolCapacity(nodes=2, gpus_per_node=4)


def test_a_pool_that_does_not_answer_its_probe_admits_nothing_until_it_does(
    api: Api, monkeypatch: pytest.MonkeyPatch, open_dir: Path
) -> None:
    registry = api.runtime.execution._registry
    probed = Probed(registry.get(wrapped_pool))
    real_get = registry.get
    monkeypatch.setattr(
        registry, "get", lambda pool: probed if pool == wrapped_pool else real_get(pool)
    )
    api.tick_until(lambda: probed.asked >= 1, what="the probe at start")
    api.runtime.controller.wait_backend_calls()

    def h100() -> dict[str, object]:
        pools = api.client.get("/v1/pools", headers=api.as_("alice")).json()["items"]
        found: dict[str, object] = next(p for p in pools if p["name"] == wrapped_pool)
        return found

    api.tick_until(lambda: h100()["available"] is False, what="the pool shown unavailable")
    assert "unreachable: connection refused" in str(h100()["message"])
    job = api.submit("alice", command=["true"], resources={"gpus": 1, "gpu_types": ["h100"]})
    for _ in range(20):
        api.runtime.controller.tick()
    assert api.status(job["id"]) == "queued" and probed.submits == 0  # nothing admitted there
    why = api.client.get(f"/v1/jobs/{job['id']}/why", headers=api.as_("alice")).json()
    assert why["summary"].startswith("waiting: no pool it may use is available now")
    assert "connection refused" in why["summary"]
    probed.down = False  # the next probe, after the backoff, finds it again
    api.tick_until(lambda: h100()["available"] is True, timeout=20, what="available again")
    api.tick_until(lambda: api.status(job["id"]) == "succeeded", timeout=20, what="the job run")
    assert probed.submits == 1
