"""Counters and histograms updated as events happen, the API timer, and which process exports
which gauges."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry

from gpupool.backends.errors import BackendRejected, BackendUnavailable
from gpupool.config import load_settings
from gpupool.controller.leader import SoleLeader
from gpupool.controller.observer import CycleSeen
from gpupool.core.errors import ConfigInvalid
from gpupool.data.grants.base import GrantError
from gpupool.scheduler import (
    Admission,
    CycleResult,
    PendingJob,
    Placement,
    Preemption,
    RunningJob,
    Snapshot,
    TeamView,
)
from gpupool.server.metrics.exporter import Metrics
from gpupool.server.metrics.recorder import Recorder
from gpupool.server.serve import PortTaken, bind_metrics
from support.server import free_port


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    got = registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


QUEUED = {
    "j1": PendingJob("j1", "a", 5, submitted_at=100.0, gpus=1),
    "j2": PendingJob("j2", "b", 0, submitted_at=50.0, gpus=2, queued_at=150.0),
    "j3": PendingJob("j3", "a", 9, submitted_at=10.0, gpus=1),
}
RUNNING = (
    RunningJob("r1", "a", 0, "h100", "p", (Placement("p-0", (0,)),)),
    RunningJob("r2", "c", 0, "h100", "p", (Placement("p-0", (1,)),)),
)


def seen(result: CycleResult, at: float = 160.0) -> CycleSeen:
    teams = {name: TeamView(name, cohort="x") for name in ("a", "b", "c")}
    return CycleSeen(
        at,
        0.02,
        Snapshot(at, (), teams, RUNNING),
        {},
        result,
        lambda _id: None,
        lambda _id: False,
        QUEUED.get,
    )


def test_a_cycle_counts_admissions_waits_and_preemptions() -> None:
    registry = CollectorRegistry()
    recorder = Recorder(registry)
    result = CycleResult(
        admissions=(
            Admission("j1", "h100", "p", (Placement("p-1", (0, 1)),)),
            Admission("j2", "h100", "p", (Placement("p-1", (2,)),)),
            Admission("gone", "h100", "p", ()),  # cancelled meanwhile: not counted
        ),
        preemptions=(Preemption("r1", "j3", "same team"), Preemption("r2", "j3", "reclaim")),
    )
    recorder.cycle(seen(result))
    assert value(registry, "gpupool_admitted_jobs_total", team="a") == 1
    assert value(registry, "gpupool_admitted_jobs_total", team="b") == 1
    # Waits count from submit, or from the requeue of a job that ran before.
    assert value(registry, "gpupool_admission_wait_time_seconds_sum", team="a") == 60.0
    assert value(registry, "gpupool_admission_wait_time_seconds_sum", team="b") == 10.0
    assert value(registry, "gpupool_scheduling_cycle_duration_seconds_count") == 1
    preempted = "gpupool_preempted_jobs_total"
    assert value(registry, preempted, preempting_team="a", reason="within_team") == 1
    assert value(registry, preempted, preempting_team="a", reason="in_cohort") == 1
    assert recorder.latest is not None
    assert [(a.job_id, a.team, a.gpus) for a in recorder.latest.admitted] == [
        ("j1", "a", 2),
        ("j2", "b", 1),
    ]


@pytest.mark.parametrize(
    ("error", "label"),
    [
        (BackendUnavailable("down"), "unavailable"),
        (BackendRejected("no such partition"), "rejected"),
        (GrantError("no credentials"), "grant"),
        (RuntimeError("adapter bug"), "other"),
    ],
)
def test_backend_errors_are_counted_by_class_not_message(error: Exception, label: str) -> None:
    registry = CollectorRegistry()
    recorder = Recorder(registry)
    recorder.backend_error("p", "poll", error)
    recorder.backend_error("p", "poll", error)
    assert value(registry, "gpupool_backend_errors_total", pool="p", operation="poll", error=label)
    assert (
        value(registry, "gpupool_backend_errors_total", pool="p", operation="poll", error=label)
        == 2
    )


def test_api_requests_are_timed_by_route_template_never_by_path() -> None:
    metrics = Metrics("all", None)
    app = FastAPI()

    @app.get("/v1/jobs/{job_id}")
    def job(job_id: str) -> dict[str, Any]:
        return {"id": job_id}

    client = TestClient(metrics.wrap(app))  # type: ignore[arg-type]
    for job_id in ("j-1", "j-2", "j-3"):
        assert client.get(f"/v1/jobs/{job_id}").status_code == 200
    assert client.get("/no/such/path").status_code == 404
    count = "gpupool_api_request_duration_seconds_count"
    registry = metrics.registry
    assert value(registry, count, method="GET", route="/v1/jobs/{job_id}", status="200") == 3
    assert value(registry, count, method="GET", route="unmatched", status="404") == 1
    exported = {s.labels.get("route") for m in registry.collect() for s in m.samples}
    assert not any(route and route.startswith("/v1/jobs/j-") for route in exported)


class Standby(SoleLeader):
    def is_leader(self) -> bool:
        return False


def names(metrics: Metrics) -> set[str]:
    return {m.name for m in metrics.registry.collect() if m.samples}


def test_only_a_leading_controller_exports_the_state_gauges() -> None:
    leading, standby = Metrics("all", SoleLeader()), Metrics("controller", Standby())
    for metrics in (leading, standby):
        metrics.recorder.cycle(seen(CycleResult()))
    api = Metrics("api", None)
    assert "gpupool_pool_capacity_gpus" in {m.name for m in leading.registry.collect()}
    assert "gpupool_pool_capacity_gpus" not in {m.name for m in standby.registry.collect()}
    assert leading.registry.get_sample_value("gpupool_leader") == 1
    assert standby.registry.get_sample_value("gpupool_leader") == 0
    assert api.registry.get_sample_value("gpupool_leader") is None  # no controller runs
    assert api.registry.get_sample_value("gpupool_process_role", {"role": "api"}) == 1


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("9464", ("127.0.0.1", 9464)),
        ("[::1]:9464", ("::1", 9464)),
        ("0.0.0.0:19464", ("0.0.0.0", 19464)),
        ("", None),
    ],
)
def test_the_metrics_address_setting(raw: str, want: tuple[str, int] | None) -> None:
    settings = load_settings({"GPUPOOL_HOME": "/tmp/x", "GPUPOOL_METRICS_ADDRESS": raw})
    assert settings.metrics_address == want


@pytest.mark.parametrize("raw", ["localhost:", "host:port", "127.0.0.1:70000", ":9464"])
def test_a_bad_metrics_address_is_refused_naming_the_setting(raw: str) -> None:
    with pytest.raises(ConfigInvalid, match="GPUPOOL_METRICS_ADDRESS") as caught:
        load_settings({"GPUPOOL_HOME": "/tmp/x", "GPUPOOL_METRICS_ADDRESS": raw})
    assert "HOST:PORT" in caught.value.message


def test_a_taken_metrics_port_is_refused_naming_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        settings = load_settings(
            {"GPUPOOL_HOME": "/tmp/x", "GPUPOOL_METRICS_ADDRESS": f"127.0.0.1:{port}"}
        )
        with pytest.raises(PortTaken, match="GPUPOOL_METRICS_ADDRESS"):
            bind_metrics(settings)


def test_scrapes_are_answered_on_the_metrics_listener() -> None:
    address = f"127.0.0.1:{free_port()}"
    listener = bind_metrics(
        load_settings({"GPUPOOL_HOME": "/tmp/x", "GPUPOOL_METRICS_ADDRESS": address})
    )
    assert listener is not None
    metrics = Metrics("controller", SoleLeader())
    metrics.serve(listener)
    try:
        answer = httpx.get(f"http://{address}/metrics", timeout=5)
    finally:
        metrics.close()
        listener.close()
    assert answer.status_code == 200
    assert 'gpupool_process_role{role="controller"} 1.0' in answer.text
    assert "gpupool_leader 1.0" in answer.text
