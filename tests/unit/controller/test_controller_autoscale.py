"""Autoscaling end to end (R4): the real controller sizes an autoscaled pool served by the fake
backend, on a virtual clock. New nodes come up after provision_delay_s and only then take jobs;
idle nodes go after idle_timeout_s down to the floor; a node drained on scale-down takes no new
job and is released when its last one ends; a spot node taken back is replaced."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import func, select

from gpupool.spec.models import Autoscale, ClusterConfig, GpuType, NodeShape, Pool, Quota, Team
from gpupool.state.models import CapacityHourRow
from support.fake_rig import Rig, fake_rig

DELAY_S = 60.0
IDLE_S = 300


def config(nodes: int = 3, warm: int = 0, node_type: str = "dedicated") -> ClusterConfig:
    return ClusterConfig(
        gpu_types={"t4": GpuType(price_per_gpu_hour=1.0)},
        pools=[
            Pool(
                name="auto",
                backend="local",  # sized by the controller; served by the fake backend here
                gpu_type="t4",
                nodes=nodes,
                node=NodeShape(gpus=2),
                autoscale=Autoscale(
                    mode="autoscale",
                    warm_nodes=warm,
                    idle_timeout_s=IDLE_S,
                    provision_delay_s=DELAY_S,
                    node_type=node_type,  # type: ignore[arg-type]
                ),
            )
        ],
        teams={"team-a": Team(quota={"t4": Quota(nominal=6)})},
    )


def nodes(rig: Rig) -> tuple[str, ...]:
    """The nodes the scheduler may place on now."""
    return rig.controller.autoscaler.ready_nodes(rig.controller._config())["auto"]


def test_scale_from_zero_after_the_provision_delay_and_back_to_zero(tmp_path: Path) -> None:
    with fake_rig(config(), tmp_path) as rig:
        rig.settle()
        assert nodes(rig) == ()
        rig.submit("a", 2, 200.0)
        rig.submit("b", 1, 200.0)
        rig.submit("c", 1, 200.0)
        rig.settle()
        status = rig.controller.autoscaler.status["auto"]
        assert (status.target, status.provisioning) == (2, 2)  # 2 + 1 + 1 GPUs: two nodes
        rig.run_until(DELAY_S - 5)
        assert {rig.job(n).status for n in "abc"} == {"queued"}  # nothing runs on no node
        up_at = rig.wait_for(lambda: rig.job("a").status == "running", until=DELAY_S + 10)
        assert up_at >= DELAY_S
        assert {rig.job(n).status for n in "bc"} == {"running"}
        assert nodes(rig) == ("auto-0", "auto-1")
        done = rig.wait_for(lambda: rig.job("c").status == "succeeded", until=DELAY_S + 260)
        rig.run_until(done + IDLE_S - 20)
        assert nodes(rig) == ("auto-0", "auto-1")  # idle, kept until the idle timeout
        rig.wait_for(lambda: nodes(rig) == (), until=done + IDLE_S + 20)
        assert rig.controller.autoscaler.status["auto"].target == 0


def test_a_warm_floor_stays_up_while_idle(tmp_path: Path) -> None:
    with fake_rig(config(warm=1), tmp_path) as rig:
        rig.wait_for(lambda: nodes(rig) == ("auto-0",), until=DELAY_S + 10)
        rig.run_until(DELAY_S + 3 * IDLE_S)
        assert nodes(rig) == ("auto-0",)
        rig.submit("now", 2, 50.0)
        rig.settle()
        assert rig.job("now").status == "running"  # the warm node takes it at once


def test_scale_down_drains_a_busy_node(tmp_path: Path) -> None:
    """max_nodes lowered below the busy nodes: one is drained; no new job goes there, and it is
    released once its job ends."""
    current = [config(nodes=2)]
    with fake_rig(current[0], tmp_path) as rig:
        rig.controller._config = lambda: current[0]
        rig.submit("long", 2, 1000.0)
        rig.submit("short", 2, 300.0)
        rig.wait_for(lambda: rig.job("short").status == "running", until=DELAY_S + 10)
        started = rig.clock.t
        current[0] = config(nodes=1)
        rig.settle()
        status = rig.controller.autoscaler.status["auto"]
        assert (status.ready, status.draining) == (1, 1)
        (drained,) = {"auto-0", "auto-1"} - set(nodes(rig))
        rig.submit("next", 2, 100.0)
        rig.wait_for(lambda: rig.job("next").status == "running", until=started + 1100)
        placed = rig.attempts("next")[0].placements[0]["node"]
        assert placed != drained
        assert drained not in nodes(rig)
        assert rig.controller.autoscaler.node_counts(current[0]) == {"auto": 1}


def test_a_spot_node_taken_back_is_replaced_and_its_job_reruns(tmp_path: Path) -> None:
    with fake_rig(config(node_type="spot"), tmp_path) as rig:
        rig.submit("train", 2, 600.0)
        rig.wait_for(lambda: rig.job("train").status == "running", until=DELAY_S + 10)
        node = rig.attempts("train")[0].placements[0]["node"]
        evicted_at = rig.clock.t
        rig.cluster.evict(node=node)
        rig.wait_for(lambda: rig.job("train").status == "queued", until=evicted_at + 30)
        rig.settle()
        status = rig.controller.autoscaler.status["auto"]
        assert (status.ready, status.provisioning) == (0, 1)  # the provider has it: a new one
        rig.wait_for(lambda: rig.job("train").status == "succeeded", until=evicted_at + 700)
        first, second = rig.attempts("train")
        assert (first.status, second.status) == ("evicted", "succeeded")
        assert (second.started_at - first.finished_at).total_seconds() >= DELAY_S - 5
        assert rig.observer.evictions == {"auto": 1}


def test_the_ledger_counts_the_nodes_the_pool_pays_for(tmp_path: Path) -> None:
    """capacity_hours follow the autoscaled pool's nodes: none while it is scaled to zero,
    the warm node's GPUs while it is kept (never the 3 nodes it may have)."""
    with fake_rig(config(), tmp_path) as rig:
        rig.run_until(1200.0)  # accrual every 60 s; nothing ever asked for a node
        assert capacity_ms(rig) == 0
    with fake_rig(config(warm=1), tmp_path / "warm") as rig:
        rig.run_until(1200.0)
        # the warm node's 2 GPUs, asked for at the start: paid for while coming up too
        assert capacity_ms(rig) == 2 * 1200 * 1000


def capacity_ms(rig: Rig) -> int:
    with rig.sessions() as session:
        return int(session.scalar(select(func.coalesce(func.sum(CapacityHourRow.gpu_ms), 0))))
