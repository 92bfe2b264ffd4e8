"""``/v1/pools`` says where an autoscaled pool stands: its target and its nodes by phase."""

from __future__ import annotations

from pathlib import Path

from support.apikit import make_api

CONFIG = """
gpu_types: {t4: {}}
pools:
  - name: auto
    backend: local
    gpu_type: t4
    nodes: 3
    node: {gpus: 2}
    autoscale: {mode: autoscale, warm_nodes: 1, provision_delay_s: 0}
  - {name: fixed, backend: local, gpu_type: t4, nodes: 1, node: {gpus: 2}}
teams:
  team-a: {quota: {t4: {nominal: 2}}, members: {alice: member}}
users:
  alice: {uid: 10001, gid: 10001}
"""


def test_pools_show_the_autoscaled_pool_s_nodes(tmp_path: Path) -> None:
    config = tmp_path / "auto.yaml"
    config.write_text(CONFIG)
    api = make_api(tmp_path / "home", config)
    try:
        api.tick_until(
            lambda: "auto" in api.runtime.controller.autoscaler.status, what="a first step"
        )
        pools = api.client.get("/v1/pools", headers=api.as_("alice")).json()["items"]
    finally:
        api.client.close()
        api.runtime.close()
    by_name = {p["name"]: p for p in pools}
    assert by_name["auto"]["nodes"] == 3  # the most it may have
    assert by_name["auto"]["autoscale"] == {
        "target": 1,
        "ready": 1,
        "provisioning": 0,
        "draining": 0,
        "reason": "the floor",
    }
    assert by_name["fixed"]["autoscale"] is None


SCALE_FROM_ZERO = """
gpu_types: {t4: {}}
pools:
  - name: auto
    backend: local
    gpu_type: t4
    nodes: 2
    node: {gpus: 2}
    autoscale: {mode: autoscale, provision_delay_s: 1}
teams:
  team-a: {quota: {t4: {nominal: 4}}, members: {alice: member}}
users:
  alice: {uid: 10001, gid: 20001}
  admin: {uid: 10000, gid: 20000, platform_admin: true}
"""


def test_a_job_on_the_local_backend_waits_for_its_node_then_runs(tmp_path: Path) -> None:
    """The real local backend, a real clock: the pool starts with no node, asks for one when
    the job waits, and the job runs once the node is up (1 s later)."""
    config = tmp_path / "zero.yaml"
    config.write_text(SCALE_FROM_ZERO)
    api = make_api(tmp_path / "home", config)
    try:
        job = str(api.submit("alice", command=["true"], resources={"gpus": 2})["id"])
        api.tick_until(
            lambda: (
                api.runtime.controller.autoscaler.status.get("auto") is not None
                and api.runtime.controller.autoscaler.status["auto"].provisioning == 1
            ),
            what="a node asked for",
        )
        assert api.status(job) == "queued"
        api.tick_until(lambda: api.status(job) == "succeeded", timeout=30, what="the job ran")
        placed = api.job("admin", job)
    finally:
        api.client.close()
        api.runtime.close()
    assert placed["status"] == "succeeded"
