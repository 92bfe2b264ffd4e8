"""The checks every adapter makes of a job spec before its own: the spec is for this pool, has a
command, and a positive runtime limit if any. One wording for all backends."""

from __future__ import annotations

from gpupool.backends.base import JobSpec
from gpupool.backends.errors import BackendRejected


def check_spec(spec: JobSpec, pool: str) -> None:
    """Raise ``BackendRejected`` naming the first of these that ``spec`` breaks."""
    if spec.pool != pool:
        raise BackendRejected(f"job is for pool {spec.pool!r}, this is {pool!r}")
    if not spec.command:
        raise BackendRejected("the job has no command")
    if spec.max_runtime_s is not None and spec.max_runtime_s <= 0:
        raise BackendRejected(f"max_runtime_s must be positive, got {spec.max_runtime_s}")
