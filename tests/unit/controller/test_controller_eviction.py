"""Spot eviction (R5) through the real controller and the fake backend: an attempt whose node
the provider takes back is requeued as a new attempt with status ``evicted``, never failed and
never counted as lost; the ledger closes its row as ``evicted`` and the observer counts it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpupool.backends.base import BackendStatus, RunState, evicted
from gpupool.controller.transitions import MAX_LOST_ATTEMPTS
from gpupool.spec.models import Autoscale, ClusterConfig, GpuType, NodeShape, Pool, Quota, Team
from support.fake_rig import fake_rig

CONFIG = ClusterConfig(
    gpu_types={"t4": GpuType(price_per_gpu_hour=1.0, spot_price_per_gpu_hour=0.3)},
    pools=[
        Pool(
            name="spot",
            backend="local",  # served by the fake backend here
            gpu_type="t4",
            nodes=2,
            node=NodeShape(gpus=2),
            autoscale=Autoscale(node_type="spot"),
        )
    ],
    teams={"team-a": Team(quota={"t4": Quota(nominal=4)})},
)


@pytest.mark.parametrize(
    ("status", "is_eviction"),
    [
        pytest.param(evicted("spot node reclaimed"), True, id="built by the helper"),
        pytest.param(BackendStatus(RunState.PREEMPTED, message="preempted by Slurm"), False,
                     id="a scheduler's preemption is not an eviction"),
        pytest.param(BackendStatus(RunState.LOST, message="evicted: no"), False,
                     id="the prefix on another state is not one"),
    ],
)  # fmt: skip
def test_the_eviction_status(status: BackendStatus, is_eviction: bool) -> None:
    assert status.evicted is is_eviction


def test_an_evicted_attempt_reruns_as_a_new_attempt(tmp_path: Path) -> None:
    with fake_rig(CONFIG, tmp_path) as rig:
        rig.submit("train", 2, 600.0)
        rig.wait_for(lambda: rig.job("train").status == "running", until=60)
        (first,) = rig.attempts("train")
        node = first.placements[0]["node"]
        assert rig.cluster.evict(node=node) == [f"{first.job_id}.1"]
        rig.wait_for(lambda: len(rig.attempts("train")) == 2, until=120)
        rig.wait_for(lambda: rig.job("train").status == "succeeded", until=2000)
        attempts = rig.attempts("train")
        ledger = {row.attempt_id: row for row in rig.ledger()}
        evictions = dict(rig.observer.evictions)
    assert [a.status for a in attempts] == ["evicted", "succeeded"]
    assert attempts[0].message == f"evicted: the provider took back node {node}"
    assert [ledger[a.id].outcome for a in attempts] == ["evicted", "succeeded"]
    assert {ledger[a.id].node_type for a in attempts} == {"spot"}
    assert evictions == {"spot": 1}


def test_evictions_never_count_as_lost_attempts(tmp_path: Path) -> None:
    """Evicted more often than a job may be lost, it still runs to the end."""
    times = MAX_LOST_ATTEMPTS + 1
    with fake_rig(CONFIG, tmp_path) as rig:
        rig.submit("stubborn", 1, 300.0)
        for n in range(1, times + 1):
            rig.wait_for(lambda n=n: len(rig.attempts("stubborn")) == n, until=n * 100.0)
            rig.wait_for(lambda: rig.job("stubborn").status == "running", until=n * 100.0)
            key = f"{rig.job('stubborn').id}.{n}"
            assert rig.cluster.evict(key=key) == [key]
        rig.wait_for(lambda: rig.job("stubborn").status == "succeeded", until=times * 100 + 900)
        statuses = [a.status for a in rig.attempts("stubborn")]
        evictions = dict(rig.observer.evictions)
    assert statuses == ["evicted"] * times + ["succeeded"]
    assert evictions == {"spot": times}
