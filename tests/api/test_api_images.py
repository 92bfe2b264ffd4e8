"""Jobs run from an image: the submit fields, and which images a pool accepts (422 naming the
field otherwise). The h100 pool runs podman and allows two registries; the t4 pool runs no
images."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.server.runtime import pool_bindings
from support.apikit import Api, make_api
from support.podman import TEST_IMAGE, podman_problem

IMAGE = TEST_IMAGE


@pytest.fixture
def api(tmp_path: Path, demo_path: Path) -> Iterator[Api]:
    config = yaml.safe_load(demo_path.read_text())
    h100 = next(p for p in config["pools"] if p["gpu_type"] == "h100")
    h100["container_runtime"] = "podman"
    h100["allowed_images"] = ["localhost/*", "ghcr.io/acme/*"]
    h100["containers"] = {"pull_secrets": {"acme": "/etc/gpupool/acme-auth.json"}}
    path = tmp_path / "images.yaml"
    path.write_text(yaml.safe_dump(config))
    built = make_api(tmp_path / "home", path)
    try:
        yield built
    finally:
        built.client.close()
        built.runtime.close()


H100 = {"gpus": 1, "gpu_types": ["h100"]}


def test_an_allowed_image_is_stored_and_shown(api: Api) -> None:
    container = {
        "mounts": [{"source": "shared/datasets", "target": "/data", "read_only": True}],
        "shm_size_gb": 2,
        "read_only_root": True,
    }
    job = api.submit(
        "alice",
        command=["sh", "-c", "echo hi"],
        resources=H100,
        image=IMAGE,
        image_pull_secret="acme",
        container=container,
    )
    shown = api.job("alice", str(job["id"]))
    for seen in (job, shown):
        assert seen["image"] == IMAGE
        assert seen["image_pull_secret"] == "acme"
        assert seen["container"] == container


def test_a_job_without_image_shows_none(api: Api) -> None:
    job = api.submit("alice", command=["true"], resources=H100)
    assert (job["image"], job["image_pull_secret"], job["container"]) == (None, None, None)


@dataclass(frozen=True)
class Bad:
    body: dict[str, Any]
    want_fields: set[str]
    want_in_message: str


BAD = [
    pytest.param(
        Bad({"image": "docker.io/evil/miner:1"}, {"image"}, "not allowed on any pool"),
        id="image outside the pool's allow-list",
    ),
    pytest.param(
        Bad({"image": "Not An Image"}, {"image"}, "not an OCI image reference"),
        id="not an image reference",
    ),
    pytest.param(
        Bad({"image": "--privileged"}, {"image"}, "starts with '-'"), id="image that is a flag"
    ),
    pytest.param(
        Bad(
            {"image": IMAGE, "resources": {"gpus": 1, "gpu_types": ["t4"]}},
            {"image"},
            "runs images",
        ),
        id="pool without a runtime",
    ),
    pytest.param(
        Bad({"image": IMAGE, "resources": {"gpus": 1}}, {"image"}, "pin gpu_types to h100"),
        id="any gpu type reaches a pool that cannot run it",
    ),
    pytest.param(
        Bad({"image": IMAGE, "image_pull_secret": "other"}, {"image_pull_secret"}, "known: acme"),
        id="unknown pull secret",
    ),
    pytest.param(
        Bad({"container": {"shm_size_gb": 1}}, {"container"}, "needs an image"),
        id="container settings without an image",
    ),
    pytest.param(
        Bad({"image_pull_secret": "acme"}, {"image_pull_secret"}, "needs an image"),
        id="pull secret without an image",
    ),
    pytest.param(
        Bad(
            {"image": IMAGE, "container": {"mounts": [{"source": "home/bob/x", "target": "/x"}]}},
            {"container.mounts.0.source"},
            "home",
        ),
        id="mount of another member's home",
    ),
    pytest.param(
        Bad(
            {"image": IMAGE, "container": {"mounts": [{"source": "shared/x", "target": "data"}]}},
            {"container.mounts.0.target"},
            "pattern",
        ),
        id="relative mount target",
    ),
    pytest.param(
        Bad({"image": IMAGE, "container": {"shm_size_gb": 500}}, {"container.shm_size_gb"}, "64"),
        id="shared memory above the pool's maximum",
    ),
]


@pytest.mark.parametrize("case", BAD)
def test_bad_image_submit_is_refused_naming_the_field(api: Api, case: Bad) -> None:
    body = {"command": ["true"], "resources": H100, **case.body}
    response = api.client.post("/v1/jobs", json=body, headers=api.as_("alice"))
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert {d["field"] for d in error["details"]} == case.want_fields
    assert case.want_in_message in str(error["details"])
    listed = api.client.get("/v1/jobs", headers=api.as_("admin")).json()["items"]
    assert listed == []


def test_the_pool_binding_carries_the_container_policy(api: Api) -> None:
    settings = api.runtime.settings
    bindings = pool_bindings(api.runtime.config, settings.state_dir, settings.home)
    h100 = bindings["demo-shared-dev-h100-pool"].context.container
    t4 = bindings["demo-shared-dev-t4-pool"].context.container
    assert h100.runtime == "podman" and not h100.network
    assert h100.pull_secrets == {"acme": "/etc/gpupool/acme-auth.json"}
    assert Path(h100.team_roots["team-a"]) == settings.home / "storage" / "team-a"
    assert t4.runtime is None and t4.team_roots == {}


def test_an_image_job_runs_in_its_container_end_to_end(api: Api) -> None:
    """Through the API, the controller and the local backend into a real podman container."""
    if problem := podman_problem():
        pytest.skip(problem)
    job = api.submit(
        "alice",
        command=["sh", "-c", 'echo "in $GPUPOOL_JOB_ID as $(id -u) with sh=$(readlink /bin/sh)"'],
        resources=H100,
        image=TEST_IMAGE,
        max_runtime_s=60,
    )
    job_id = str(job["id"])
    api.tick_until(lambda: api.status(job_id) in ("succeeded", "failed"), 60, "the job's end")
    logs = api.client.get(f"/v1/jobs/{job_id}/logs", headers=api.as_("alice")).text
    assert api.status(job_id) == "succeeded", logs
    alice = api.runtime.config.users["alice"].uid
    # busybox's sh: the image's /bin, not the host's
    assert logs == f"in {job_id} as {alice} with sh=busybox\n"
