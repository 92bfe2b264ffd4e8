"""Routing at submit (R2, Q5) and the protection from preemption end to end (Q10): a multi-node
job that no eligible pool's backend can run is refused with a 422 naming ``resources.nodes``;
`why` names the victims a minimum run time protects."""

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


@pytest.fixture
def protected_api(tmp_path: Path, demo_path: Path) -> Iterator[Api]:
    """The demo, training jobs protected from preemption for an hour."""
    text = demo_path.read_text(encoding="utf-8").replace(
        "training: {value: 100, default: true}",
        "training: {value: 100, default: true, min_runtime_s: 3600}",
    )
    config = tmp_path / "protected.yaml"
    config.write_text(text, encoding="utf-8")
    built = make_api(tmp_path / "home", config)
    try:
        yield built
    finally:
        built.client.close()
        built.runtime.close()


def test_why_names_a_victim_protected_by_its_minimum_run_time(protected_api: Api) -> None:
    """bob fills team-b's h100 nominal with training jobs; his urgent job could preempt one of
    them, but they have not run their minimum run time: `why` says so."""
    api = protected_api
    h100 = {"gpus": 1, "gpu_types": ["h100"]}
    sleeping = ["sh", "-c", "sleep 30"]
    bobs = [api.submit("bob", command=sleeping, resources=h100)["id"] for _ in range(4)]
    api.tick_until(lambda: all(api.status(j) == "running" for j in bobs), what="bob fills h100")
    urgent = api.submit("bob", command=sleeping, resources=h100, priority_class="interactive")
    api.tick_until(
        lambda: bool(
            api.client.get(f"/v1/jobs/{urgent['id']}/why", headers=api.as_("bob")).json()["reasons"]
        ),
        what="the urgent job is considered",
    )
    why = api.client.get(f"/v1/jobs/{urgent['id']}/why", headers=api.as_("bob")).json()
    assert api.status(str(urgent["id"])) == "queued"
    assert "have not run their minimum run time yet" in why["summary"]
    for job_id in bobs:
        api.client.post(f"/v1/jobs/{job_id}/cancel", headers=api.as_("bob"))
