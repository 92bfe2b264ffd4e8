"""Routing at submit (R2, Q5): a multi-node job that no eligible pool's backend can run is
refused with a 422 naming ``resources.nodes``; a job pinned to a backend never runs elsewhere."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.apikit import Api, make_api


@pytest.fixture
def two_node_api(tmp_path: Path, demo_path: Path) -> Iterator[Api]:
    """The demo, its h100 pool (backend local) with two nodes."""
    text = demo_path.read_text(encoding="utf-8")
    config = tmp_path / "two-nodes.yaml"
    config.write_text(text.replace("    nodes: 1\n", "    nodes: 2\n", 1), encoding="utf-8")
    built = make_api(tmp_path / "home", config)
    try:
        yield built
    finally:
        built.client.close()
        built.runtime.close()


def test_a_gang_no_backend_can_run_is_refused_naming_resources_nodes(two_node_api: Api) -> None:
    body = {"command": ["true"], "resources": {"gpus": 1, "nodes": 2, "gpu_types": ["h100"]}}
    response = two_node_api.client.post("/v1/jobs", json=body, headers=two_node_api.as_("alice"))
    assert response.status_code == 422, response.text
    (detail,) = response.json()["error"]["details"]
    assert detail["field"] == "resources.nodes"
    assert "local, which run single-node jobs only; use nodes: 1" in detail["message"]


def test_the_same_job_on_one_node_is_accepted(two_node_api: Api) -> None:
    job = two_node_api.submit("alice", resources={"gpus": 1, "nodes": 1, "gpu_types": ["h100"]})
    assert job["status"] == "queued"
