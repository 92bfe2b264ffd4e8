"""Checks of a submit that names a container image, against the applied configuration.

A job with ``image`` may only be placed on pools that run it: the scheduler places a job on any
pool of its gpu types (and pinned backend) that its team may use, so every such pool large
enough for the job must run images (a ``container_runtime``, or a backend that runs every job
from an image: ``spec.checks.NATIVE_IMAGE_BACKENDS``) and allow the image (``allowed_images``).
Otherwise the submit is refused with one 422 naming ``image`` and the pools that would run it,
so the user can pin ``gpu_types`` or ``backend`` to them. Never a silent failure at dispatch.

What this module returns is the job's stored container record (``JobRow.container``).
"""

from __future__ import annotations

from typing import Any

from gpupool.core.errors import InvalidRequest
from gpupool.core.images import ImageProblem, check_reference, is_allowed
from gpupool.data.paths import PathProblem, check_path
from gpupool.server.schemas import JobSubmit
from gpupool.spec.checks import runs_images
from gpupool.spec.models import ClusterConfig, Pool


def check_image(
    body: JobSubmit, team: str, user: str, config: ClusterConfig
) -> dict[str, Any] | None:
    """The container record of the job (``None``: it runs no image), or one 422 naming every
    offending field."""
    if body.image is None:
        extra = [
            {"field": name, "message": f"'{name}' needs an image; set image or remove {name}"}
            for name in ("image_pull_secret", "container")
            if getattr(body, name) is not None
        ]
        if extra:
            raise InvalidRequest(_summary(extra), extra)
        return None
    problems: list[dict[str, str]] = []
    try:
        check_reference(body.image)
    except ImageProblem as exc:
        bad = [{"field": "image", "message": str(exc)}]
        raise InvalidRequest(_summary(bad), bad) from None
    container = body.container
    mounts = []
    for i, mount in enumerate(container.mounts if container else []):
        try:
            source = check_path(mount.source, user)
        except PathProblem as exc:
            problems.append({"field": f"container.mounts.{i}.source", "message": str(exc)})
            continue
        if ".." in mount.target.split("/"):
            problems.append({"field": f"container.mounts.{i}.target", "message": "contains '..'"})
        mounts.append({"source": source, "target": mount.target, "read_only": mount.read_only})
    pools = reachable_pools(body, team, config)
    problem = _pool_problem(body.image, pools)
    if problem is not None:
        problems.append({"field": "image", "message": problem})
    else:
        secret = body.image_pull_secret
        if secret is not None and any(secret not in p.containers.pull_secrets for p in pools):
            names = sorted({n for p in pools for n in p.containers.pull_secrets})
            problems.append(
                {
                    "field": "image_pull_secret",
                    "message": f"unknown pull secret {secret!r} on the pools this job may use; "
                    f"known: {', '.join(names) or 'none (ask an operator to add one)'}",
                }
            )
        shm = container.shm_size_gb if container else None
        largest = min((p.containers.max_shm_size_gb for p in pools), default=0.0)
        if shm is not None and shm > largest:
            problems.append(
                {
                    "field": "container.shm_size_gb",
                    "message": f"at most {largest:g} GB on the pools this job may use",
                }
            )
    if problems:
        raise InvalidRequest(_summary(problems), problems)
    return {
        "image": body.image,
        "pull_secret": body.image_pull_secret,
        "mounts": mounts,
        "shm_size_gb": container.shm_size_gb if container else None,
        "read_only_root": container.read_only_root if container else False,
    }


def reachable_pools(body: JobSubmit, team: str, config: ClusterConfig) -> list[Pool]:
    """The pools the scheduler could place the job on: of its gpu types (any when it names
    none), its pinned backend, usable by the team, and large enough for one node of it."""
    res = body.resources
    types = set(res.gpu_types) if res.gpu_types else set(config.gpu_types)
    return [
        p
        for p in config.pools
        if p.gpu_type in types
        and p.dedicated_to in (None, team)
        and (body.backend == "auto" or p.backend == body.backend)
        and p.node.gpus >= res.gpus
        and p.nodes >= res.nodes
        and p.node.cpus >= res.cpus
        and p.node.memory_gb >= res.memory_gb
    ]


def _pool_problem(image: str, pools: list[Pool]) -> str | None:
    if not pools:
        return None  # the resource checks already said no pool fits
    running = [p for p in pools if runs_images(p)]
    allowing = [p for p in running if is_allowed(image, p.allowed_images)]
    if not running:
        return (
            "no pool this job may use runs images (none has a container_runtime); "
            "submit without image, or ask an operator to set container_runtime and "
            "allowed_images on a pool"
        )
    if not allowing:
        patterns = sorted({pattern for p in running for pattern in p.allowed_images})
        return (
            f"image {image!r} is not allowed on any pool this job may use; allowed: "
            f"{', '.join(patterns) or 'no images at all'}"
        )
    others = [p.name for p in pools if p not in allowing]
    if others:
        fix = sorted({p.gpu_type for p in allowing})
        backends = sorted({p.backend for p in allowing})
        return (
            f"pools {', '.join(sorted(others))} may also take this job but cannot run image "
            f"{image!r}; pin gpu_types to {', '.join(fix)} or backend to "
            f"{' or '.join(backends)} so it goes only to "
            f"{', '.join(sorted(p.name for p in allowing))}"
        )
    return None


def _summary(problems: list[dict[str, str]]) -> str:
    fields = ", ".join(p["field"] for p in problems)
    return f"invalid job: {len(problems)} problem(s) in {fields}"
