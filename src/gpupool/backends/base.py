"""The backend contract: what every execution adapter implements (docs/architecture.md §6).

A backend runs attempts. ``submit`` is idempotent on ``spec.key``: submitting the same key
twice returns the same handle and never starts a second run, even across control-plane
restarts. A :class:`JobHandle` is persisted by the control plane and must be enough to
poll, cancel and read logs after a restart.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from gpupool.data.grants.base import Grant


class Capability(StrEnum):
    GANG = "gang"  # runs multi-node jobs
    LOG_STREAM = "log_stream"  # logs are readable while the job runs
    CAPACITY = "capacity"  # can report its own capacity
    SCALE = "scale"  # can add and remove nodes
    POSIX_IDENTITY = "posix_identity"  # runs the job as the user's uid/gid


@dataclass(frozen=True, slots=True)
class PosixIdentity:
    uid: int
    gid: int
    groups: tuple[int, ...] = ()


@dataclass(frozen=True)
class JobSpec:
    """What a backend needs to run one attempt. ``env`` holds the user's variables only;
    the adapter adds the contract variables (see :func:`contract_env`)."""

    job_id: str
    attempt: int
    team: str
    user: str
    command: tuple[str, ...]
    pool: str
    gpu_type: str
    gpus_per_node: int
    nodes: int = 1
    cpus: float = 1.0
    memory_gb: float = 1.0
    image: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    max_runtime_s: int | None = None
    posix: PosixIdentity | None = None
    # Device indices per node chosen by the scheduler (used by backends that pin GPUs).
    devices: tuple[tuple[int, ...], ...] = ()
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    # Scoped, expiring data access (pools with data_access: grant). Holds secrets: it is
    # never logged nor persisted; it reaches the job only through contract_env.
    grant: Grant | None = field(default=None, repr=False, compare=False)
    # Tasks of a job array: the array's id and this task's index (None: not in an array).
    array_id: str | None = None
    array_index: int | None = None
    # Seconds of work between the job's own checkpoints (None: it declared none); the job
    # reads it as GPUPOOL_CHECKPOINT_INTERVAL_S.
    checkpoint_interval_s: int | None = None

    @property
    def key(self) -> str:
        return f"{self.job_id}.{self.attempt}"


@dataclass(frozen=True)
class JobHandle:
    """Persisted reference to a submitted attempt. ``data`` is adapter-specific strings."""

    backend: str
    pool: str
    provider_id: str
    key: str
    data: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        return {
            "backend": self.backend,
            "pool": self.pool,
            "provider_id": self.provider_id,
            "key": self.key,
            "data": dict(self.data),
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, object]) -> JobHandle:
        data = raw.get("data") or {}
        assert isinstance(data, Mapping)
        return cls(
            backend=str(raw["backend"]),
            pool=str(raw["pool"]),
            provider_id=str(raw["provider_id"]),
            key=str(raw["key"]),
            data={str(k): str(v) for k, v in data.items()},
        )


class RunState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    LOST = "lost"


FINAL_STATES = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED, RunState.PREEMPTED, RunState.LOST}
)


@dataclass(frozen=True, slots=True)
class BackendStatus:
    state: RunState
    exit_code: int | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Bytes of the attempt's combined log from ``offset``; ``next_offset`` continues."""

    data: bytes
    next_offset: int
    complete: bool = False  # True when the attempt is final and no more output will come


@dataclass(frozen=True)
class AdapterContext:
    """What an adapter factory is given: one pool's settings (docs/architecture.md §4) and
    where it may keep state. ``options`` is the pool's ``options:`` mapping; each adapter
    validates its own keys (``backends.options`` runs the same parsers when a configuration is
    validated). ``state_dir`` survives control-plane restarts."""

    pool: str
    gpu_type: str
    options: Mapping[str, Any] = field(default_factory=dict)
    state_dir: Path = Path(".gpupool")
    nodes: int = 1
    gpus_per_node: int = 0


@dataclass(frozen=True, slots=True)
class PoolCapacity:
    """What a backend with ``Capability.CAPACITY`` reports for its pool: schedulable nodes
    and the GPUs of the pool's type on each (the smallest, if they differ)."""

    nodes: int
    gpus_per_node: int


@runtime_checkable
class CapacityReporter(Protocol):
    def pool_capacity(self) -> PoolCapacity: ...


@runtime_checkable
class Finder(Protocol):
    """Optional: look an attempt up by its key alone, without starting anything.

    The controller uses it to stop an attempt it gave up on while the backend could not be
    reached (a submission may have reached the backend unseen): once the backend answers
    again, whatever runs under the abandoned key is found and stopped."""

    def find(self, key: str) -> JobHandle | None: ...


@runtime_checkable
class Backend(Protocol):
    name: str
    capabilities: frozenset[Capability]

    def submit(self, spec: JobSpec) -> JobHandle: ...

    def poll(self, handles: Sequence[JobHandle]) -> Mapping[str, BackendStatus]:
        """Status per ``handle.key``."""
        ...

    def logs(self, handle: JobHandle, offset: int = 0) -> LogChunk: ...

    def cancel(self, handle: JobHandle, grace_s: float) -> None:
        """Stop the attempt: termination signal, then kill after ``grace_s``. Idempotent."""
        ...


def contract_env(spec: JobSpec, workdir: str, inputs: str, outputs: str) -> dict[str, str]:
    """The variables every backend gives a job (docs/architecture.md §6), on top of the user's
    ``env``."""
    env = dict(spec.env)
    env.update(
        {
            "GPUPOOL_JOB_ID": spec.job_id,
            "GPUPOOL_ATTEMPT": str(spec.attempt),
            "GPUPOOL_TEAM": spec.team,
            "GPUPOOL_USER": spec.user,
            "GPUPOOL_GPU_TYPE": spec.gpu_type,
            "GPUPOOL_JOB_WORKDIR": workdir,
            "GPUPOOL_INPUTS": inputs,
            "GPUPOOL_OUTPUTS": outputs,
        }
    )
    if spec.array_id is not None and spec.array_index is not None:
        env["GPUPOOL_ARRAY_JOB_ID"] = spec.array_id
        env["GPUPOOL_ARRAY_INDEX"] = str(spec.array_index)
    if spec.checkpoint_interval_s is not None:
        env["GPUPOOL_CHECKPOINT_INTERVAL_S"] = str(spec.checkpoint_interval_s)
    if spec.grant is not None:
        env.update(spec.grant.env())
    return env
