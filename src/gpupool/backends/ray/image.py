"""Ray jobs from an image: the job's ``runtime_env`` gets ``image_uri`` (Ray 2.10 and later).

Ray runs the job's supervisor, and so its entrypoint, in a podman container of the image on
the node (Ray's ``image_uri`` plugin). That container is Ray's, not gpupool's, and Ray fixes
its shape: the host's network, PID and IPC namespaces (workers must reach the raylet), and one
mount, Ray's temp dir, at the same path. What follows here:

* the image must hold Python and the cluster's Ray version (Ray starts its worker from it);
* the pool's ``container_runtime`` is ``podman`` (the only runtime Ray drives), and the pool
  says its containers share the network (``containers.network: true``, a configuration check);
* the attempt's dirs must lie under Ray's temp dir (option ``ray_temp_dir``, default
  ``/tmp/ray``), the one path the container shares with the host: ``working_dir_root`` must be
  below it, or the job could not enter its work dir;
* Ray's ``image_uri`` takes no other options: ``container.mounts``, ``shm_size_gb``,
  ``read_only_root`` and ``image_pull_secret`` are refused with a message saying so (the
  node's podman pulls with its own login), and so are team storage mounts;
* GPUs: Ray sets ``CUDA_VISIBLE_DEVICES`` for the job; the devices reach the container through
  the node's podman configuration (an OCI hook or CDI), which Ray does not control.

A Ray installation whose ``RuntimeEnv`` has no ``image_uri`` refuses images with the version
it found.
"""

from __future__ import annotations

from pathlib import Path

from gpupool.backends.base import ContainerPolicy, JobSpec
from gpupool.backends.containers import check_image
from gpupool.backends.errors import BackendRejected

RUNTIMES = ("podman",)


def image_uri_supported() -> tuple[bool, str]:
    """Whether the installed Ray knows the ``image_uri`` runtime env field, and its version."""
    try:
        import ray
        from ray.runtime_env import RuntimeEnv
    except ImportError:
        return False, "none"
    return "image_uri" in getattr(RuntimeEnv, "known_fields", ()), str(ray.__version__)


def check(
    spec: JobSpec,
    policy: ContainerPolicy,
    work: Path,
    ray_temp_dir: str,
    supported: bool,
    version: str,
) -> None:
    """Refuse what Ray's ``image_uri`` cannot give the job (see the module docstring)."""
    check_image(spec, policy, RUNTIMES, "ray")
    if not supported:
        raise BackendRejected(
            f"Ray {version} cannot run jobs from an image (its runtime_env has no image_uri; "
            "Ray 2.10 or later has it): submit without image, or upgrade Ray"
        )
    container = spec.container
    if container is not None:
        asked = [
            name
            for name, value in (
                ("container.mounts", container.mounts),
                ("container.shm_size_gb", container.shm_size_gb),
                ("container.read_only_root", container.read_only_root),
                ("image_pull_secret", container.pull_secret),
            )
            if value
        ]
        if asked:
            raise BackendRejected(
                f"Ray's image_uri takes no {', '.join(asked)}: remove them, or use a local "
                "or slurm pool"
            )
    root = Path(ray_temp_dir)
    if root not in work.parents:
        raise BackendRejected(
            f"the attempt's work dir {work} is outside Ray's temp dir {root}, the only path "
            "Ray mounts into an image's container: set the pool's working_dir_root below it"
        )


def runtime_env(spec: JobSpec, env: dict[str, str]) -> dict[str, object]:
    assert spec.image is not None
    return {"image_uri": spec.image, "env_vars": env}
