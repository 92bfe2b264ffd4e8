"""What every backend checks and derives the same way for a job from an image.

* :func:`check_image`: the pool runs images with a runtime this backend supports, the reference
  is valid and the pool still allows it (the configuration may have changed since the submit,
  where the same checks answered with a 422).
* :func:`storage_mounts`: the team's ``shared/`` and the user's ``home/<user>/`` at their host
  paths (where the pool mounts storage and the team's root is a local directory), the user's
  own ``container.mounts``, and the ``HOME`` the job gets inside.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from gpupool.backends.base import ContainerPolicy, JobSpec
from gpupool.backends.errors import BackendRejected
from gpupool.core.images import ImageProblem, check_reference, is_allowed


def check_image(
    spec: JobSpec, policy: ContainerPolicy, runtimes: Sequence[str], backend: str
) -> str:
    """The runtime to run ``spec.image`` with, or :class:`BackendRejected` saying why not."""
    assert spec.image is not None
    if policy.runtime not in runtimes:
        raise BackendRejected(
            f"this {backend} pool runs no images (container_runtime: {policy.runtime}); "
            f"set container_runtime to one of {', '.join(runtimes)} to run {spec.image!r}"
        )
    try:
        check_reference(spec.image)
    except ImageProblem as exc:
        raise BackendRejected(f"image: {exc}") from None
    if not is_allowed(spec.image, policy.allowed_images):
        raise BackendRejected(f"image {spec.image!r} is not in this pool's allowed_images")
    return policy.runtime


def storage_mounts(
    spec: JobSpec, policy: ContainerPolicy, workdir: str
) -> tuple[list[tuple[str, str, bool]], str]:
    """``(mounts, home)``: (host path, path inside, read-only) of the team's storage and the
    user's mounts, and HOME inside (the user's team home when mounted, else ``workdir``)."""
    root = policy.team_roots.get(spec.team) if policy.mount_storage else None
    mounts: list[tuple[str, str, bool]] = []
    home = workdir
    if root is not None:
        shared, own = f"{root}/shared", f"{root}/home/{spec.user}"
        for path in (shared, own):
            if os.path.isdir(path):
                mounts.append((path, path, False))
        if os.path.isdir(own):
            home = own
    for mount in spec.container.mounts if spec.container is not None else ():
        if root is None:
            raise BackendRejected(
                f"mount {mount.source!r}: this pool mounts no team storage (the team's root is "
                "not a local directory, or containers.mount_storage is off)"
            )
        mounts.append((f"{root}/{mount.source}", mount.target, mount.read_only))
    return mounts, home
