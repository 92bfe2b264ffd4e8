"""Building the scheduler's snapshot: reported capacity and decayed usage."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gpupool.backends.base import PoolCapacity
from gpupool.controller.fairshare import UsageInterval, decayed_usage
from gpupool.controller.snapshot import build_snapshot
from gpupool.spec.load import load_config


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
