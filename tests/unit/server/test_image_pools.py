"""Which pools run a job's image: those with a ``container_runtime``, and those whose backend
runs every job from an image (Kubernetes, Azure ML) without one; ``allowed_images`` decides on
both."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpupool.core.errors import InvalidRequest
from gpupool.server.schemas import JobSubmit
from gpupool.server.services.image_checks import check_image
from gpupool.spec.checks import check_containers, runs_images
from gpupool.spec.models import ClusterConfig, GpuType, NodeShape, Pool, Quota, Team

IMAGE = "registry.example/ml/train:1"


def pool(backend: str, **fields: object) -> Pool:
    return Pool(
        name=f"{backend}-pool",
        backend=backend,  # type: ignore[arg-type]
        gpu_type="gpu",
        nodes=1,
        node=NodeShape(gpus=4),
        **fields,  # type: ignore[arg-type]
    )


def config(*pools: Pool) -> ClusterConfig:
    return ClusterConfig(
        gpu_types={"gpu": GpuType()},
        pools=list(pools),
        teams={"a": Team(quota={"gpu": Quota(nominal=4)})},
    )


@dataclass(frozen=True)
class Case:
    pool: Pool
    runs: bool
    refused: str | None  # part of the 422's message, or None: accepted


CASES = [
    pytest.param(
        Case(pool("kubernetes", allowed_images=["registry.example/*"]), True, None),
        id="a kubernetes pool runs allowed images without a runtime",
    ),
    pytest.param(
        Case(pool("azure-ml", allowed_images=["registry.example/*"]), True, None),
        id="an azure-ml pool runs allowed images without a runtime",
    ),
    pytest.param(
        Case(pool("kubernetes", allowed_images=["other.example/*"]), True, "not allowed"),
        id="a kubernetes pool still refuses images its globs do not match",
    ),
    pytest.param(
        Case(pool("local", allowed_images=[]), False, "runs images"),
        id="a local pool without a runtime runs no image",
    ),
    pytest.param(
        Case(
            pool("local", container_runtime="podman", allowed_images=["registry.example/*"]),
            True,
            None,
        ),
        id="a local pool with podman runs allowed images",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_which_pools_run_images(case: Case) -> None:
    cluster = config(case.pool)
    assert runs_images(case.pool) is case.runs
    assert list(check_containers(cluster)) == []
    body = JobSubmit.model_validate(
        {"team": "a", "command": ["train"], "resources": {"gpus": 1}, "image": IMAGE}
    )
    if case.refused is None:
        assert check_image(body, "a", "alice", cluster) is not None
    else:
        with pytest.raises(InvalidRequest) as raised:
            check_image(body, "a", "alice", cluster)
        assert raised.value.details[0]["field"] == "image"
        assert case.refused in raised.value.details[0]["message"]
