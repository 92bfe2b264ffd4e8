"""Building the scheduler's snapshot: reported capacity and decayed usage."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from gpupool.backends.base import PoolCapacity
from gpupool.config import sqlite_url
from gpupool.controller.fairshare import UsageInterval, decayed_usage
from gpupool.controller.snapshot import build_snapshot, node_name, team_views
from gpupool.controller.state import pending_job
from gpupool.scheduler import Placement, QuotaView, RunningJob, held_gpus
from gpupool.spec.load import load_config
from gpupool.state.db import make_engine, session_factory, upgrade
from gpupool.state.models import AttemptRow
from gpupool.state.queue import PENDING_COLUMNS
from support.rows import T0, queued_job


@pytest.mark.parametrize(
    ("seen", "want_nodes", "want_gpus"),
    [
        pytest.param(None, 1, 4, id="no report: the configuration"),
        pytest.param(PoolCapacity(0, 0), 0, 4, id="no usable node: nothing to plan with"),
        pytest.param(PoolCapacity(5, 2), 1, 2, id="never more than configured, fewer GPUs"),
    ],
)
def test_reported_capacity_caps_the_configured_pool(
    demo_path: Path, seen: PoolCapacity | None, want_nodes: int, want_gpus: int
) -> None:
    config = load_config(demo_path)
    capacity = {} if seen is None else {"demo-shared-dev-h100-pool": seen}
    snapshot = build_snapshot(config, 0.0, [], [], capacity=capacity)
    pool = next(p for p in snapshot.pools if p.name == "demo-shared-dev-h100-pool")
    assert len(pool.nodes) == want_nodes
    assert all(n.gpus == want_gpus for n in pool.nodes)


def test_team_usage_is_summed_from_the_running_jobs(demo_path: Path) -> None:
    config = load_config(demo_path)
    h100 = "demo-shared-dev-h100-pool"

    def running(job_id: str, team: str, node: int, devices: tuple[int, ...]) -> RunningJob:
        placement = Placement(node_name(h100, node), devices)
        return RunningJob(job_id, team, 0, "h100", h100, (placement,), terminating=node == 1)

    jobs = [running("a1", "team-a", 0, (0, 1)), running("a2", "team-a", 1, (0,))]
    jobs.append(running("b1", "team-b", 0, (2,)))
    snapshot = build_snapshot(config, 0.0, [], jobs)
    assert snapshot.usage == held_gpus(jobs) == {"team-a": {"h100": 3}, "team-b": {"h100": 1}}


def test_decayed_usage_halves_per_half_life() -> None:
    hour = 3600.0
    recent = UsageInterval("a", 1, start=9 * hour, end=10 * hour)
    old = UsageInterval("b", 1, start=8 * hour, end=9 * hour)
    running = UsageInterval("c", 2, start=9 * hour, end=None)
    usage = decayed_usage([recent, old, running], now=10 * hour, half_life_s=hour)
    assert usage["b"] == pytest.approx(usage["a"] / 2)
    assert usage["c"] == pytest.approx(2 * usage["a"])
    # One GPU-hour ending now, half-life one hour: integral of 2^-t over [0, 1] hours.
    assert usage["a"] == pytest.approx(hour / math.log(2) * 0.5)


def test_a_requeued_job_waits_from_its_last_attempts_end(tmp_path: Path) -> None:
    engine = make_engine(sqlite_url(tmp_path))
    upgrade(engine)
    sessions = session_factory(engine)
    with sessions.begin() as session:
        session.add_all([queued_job("j-new"), queued_job("j-back", attempt=1)])
    with sessions.begin() as session:
        session.add(
            AttemptRow(
                job_id="j-back",
                number=1,
                status="preempted",
                pool="p",
                gpu_type="h100",
                placements=[],
                borrowed=0,
                admitted_at=T0,
                finished_at=T0 + timedelta(seconds=50),
                message="",
                cancel_sent=False,
            )
        )
    with sessions() as session:
        jobs = {row.id: pending_job(row) for row in session.execute(select(*PENDING_COLUMNS))}
    engine.dispose()
    assert jobs["j-new"].queued_at is None
    assert jobs["j-back"].queued_at == (T0 + timedelta(seconds=50)).timestamp()
    assert jobs["j-back"].waiting_since == jobs["j-back"].queued_at


def test_every_team_gets_a_gpu_less_cap_on_every_gpu_type(demo_path: Path) -> None:
    """A team without a quota entry for a type gets a zero cap there, never none (no cap)."""
    views = team_views(load_config(demo_path), {})
    assert views["team-a"].quota == {
        "h100": QuotaView(2, 0, None, 8.0, 32.0),
        "t4": QuotaView(2, None, None, 8.0, 32.0),
    }
    assert views["team-c"].quota == {
        "h100": QuotaView(0, None, None, 0.0, 0.0),
        "t4": QuotaView(2, None, None, 8.0, 32.0),
    }
