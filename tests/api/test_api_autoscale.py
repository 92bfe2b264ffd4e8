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
