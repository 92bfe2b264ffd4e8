"""Wire schemas of the REST API, split by role (docs/code-style.md §10).

Write bodies forbid unknown fields; server-owned fields get their own, clearer 422 (see
``SERVER_OWNED``). Read models are built from store rows and always carry every field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

JobKind = Literal["training", "inference", "interactive", "batch", "data-prep"]

# Fields a client may read but never set (X7). A submit body naming any of them is
# rejected with 422 listing each one.
SERVER_OWNED = frozenset(
    {
        "id",
        "status",
        "user",
        "pool",
        "gpu_type",
        "handle",
        "attempt",
        "attempts",
        "priority",
        "submitted_at",
        "started_at",
        "finished_at",
        "exit_code",
        "message",
        "created_at",
        "updated_at",
        "admitted_at",
        "pending_reasons",
        "array_id",
        "array_index",
    }
)


class _Write(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResourcesIn(_Write):
    gpus: int = Field(default=1, ge=0, le=64, description="GPUs per node")
    gpu_types: list[str] = Field(
        default_factory=list, description="Acceptable gpu types in order; empty = any"
    )
    nodes: int = Field(default=1, ge=1, le=1024)
    cpus: float = Field(default=1.0, gt=0, le=1024)
    memory_gb: float = Field(default=1.0, gt=0, le=16384)


class MountIn(_Write):
    source: str = Field(
        min_length=1,
        max_length=1024,
        description="A path in the team's storage: shared/... or home/<you>/...",
    )
    target: str = Field(
        min_length=2, max_length=1024, pattern=r"^/", description="Absolute path in the container"
    )
    read_only: bool = False


class ContainerIn(_Write):
    """How a job's container is set up (only with ``image``)."""

    mounts: list[MountIn] = Field(default_factory=list, max_length=32)
    shm_size_gb: float | None = Field(default=None, gt=0, le=1024, description="/dev/shm size")
    read_only_root: bool = Field(default=False, description="Mount the image's files read-only")


class JobSubmit(_Write):
    name: str | None = Field(default=None, max_length=200)
    team: str | None = None
    command: list[str] = Field(min_length=1, max_length=4096)
    resources: ResourcesIn = ResourcesIn()
    priority_class: str | None = None
    kind: JobKind = "training"
    backend: str = "auto"
    env: dict[str, str] = Field(default_factory=dict)
    inputs: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    max_runtime_s: int | None = Field(default=None, gt=0, le=30 * 24 * 3600)
    checkpoint_interval_s: int | None = Field(
        default=None,
        gt=0,
        le=30 * 24 * 3600,
        description="Seconds of work between the job's own checkpoints (it sees them as "
        "GPUPOOL_CHECKPOINT_INTERVAL_S); a preempted attempt resumes from the last one",
    )
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    image: str | None = Field(
        default=None,
        max_length=512,
        description="OCI image to run the command in, e.g. ghcr.io/acme/train:1.4; the pool "
        "must allow it (allowed_images)",
    )
    image_pull_secret: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="Name of the pool's registry credentials to pull the image with",
    )
    container: ContainerIn | None = None


class ArraySubmit(JobSubmit):
    """A job array: one job per index of ``array`` (``core.arrays``), stored together."""

    array: str = Field(
        min_length=1,
        max_length=1000,
        description="Task indices, Slurm-like: 0-999, 0-9:2 (step) or 1,3,5",
    )


class MountOut(BaseModel):
    source: str
    target: str
    read_only: bool = False


class ContainerOut(BaseModel):
    mounts: list[MountOut] = Field(default_factory=list)
    shm_size_gb: float | None = None
    read_only_root: bool = False


class ResourcesOut(BaseModel):
    gpus: int
    gpu_types: list[str]
    nodes: int
    cpus: float
    memory_gb: float


class GrantOut(BaseModel):
    """The public view of an attempt's data grant: no URL, no signature."""

    kind: str
    reads: list[str]
    writes: list[str]
    expires_at: datetime


class AttemptOut(BaseModel):
    number: int
    status: str
    pool: str
    gpu_type: str
    devices: list[list[int]]
    borrowed: int
    admitted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    exit_code: int | None
    message: str
    grant: GrantOut | None = None


class JobOut(BaseModel):
    id: str
    name: str
    team: str
    user: str
    status: str
    priority_class: str
    priority: int
    kind: str
    backend: str
    command: list[str]
    env: dict[str, str]
    resources: ResourcesOut
    max_runtime_s: int | None
    checkpoint_interval_s: int | None = None
    inputs: list[str]
    outputs: list[str]
    submitted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    attempt: int
    pool: str | None
    gpu_type: str | None
    exit_code: int | None
    message: str
    attempts: list[AttemptOut] | None = None
    # Tasks of a job array: the array's id and this task's index (its id: <array_id>_<index>).
    array_id: str | None = None
    array_index: int | None = None
    image: str | None = None
    image_pull_secret: str | None = None
    container: ContainerOut | None = None


class EventOut(BaseModel):
    at: datetime
    kind: str
    message: str


class JobEventOut(EventOut):
    job_id: str
    team: str
    name: str


class JobPage(BaseModel):
    items: list[JobOut]
    next_cursor: str | None
    # Grouped listings (group=true): tasks per status of each array with a task on the page.
    arrays: dict[str, dict[str, int]] = Field(default_factory=dict)


class ArrayOut(BaseModel):
    """A job array, compactly: its tasks are ``<id>_<index>`` for each index submitted."""

    id: str
    name: str
    team: str
    user: str
    count: int
    first_index: int
    last_index: int
    submitted_at: datetime
    counts: dict[str, int]  # tasks per status


class ReasonOut(BaseModel):
    gpu_type: str
    code: str
    message: str


class BlockerOut(BaseModel):
    """Something a queued job waits for. ``kind``: ``queue`` (jobs ahead of it in its team's
    queue), ``running`` (jobs running now that must end first where it is forecast to start),
    ``queued`` (jobs of other teams forecast to start before it) or ``quota`` (its team's quota,
    its cohort's or a budget). ``jobs`` lists only jobs of teams the caller may read; the
    others are only counted."""

    kind: str
    message: str
    count: int = 0
    gpus: int = 0
    gpu_type: str | None = None
    jobs: list[str] = Field(default_factory=list)


class EstimateOut(BaseModel):
    """When a queued job is expected to start: the production scheduler run forward from the
    controller's last cycle (``forecast_at``), if nothing else is submitted. ``start_at`` None:
    not within the forecast's horizon. ``method`` and ``basis`` say how the runtimes of the
    jobs it waits for were taken (their limits, similar past jobs) and so how sure it is;
    ``earliest`` .. ``latest`` is the range."""

    start_at: datetime | None = None
    earliest: datetime | None = None
    latest: datetime | None = None
    pool: str | None = None
    gpu_type: str | None = None
    method: str = "none"
    basis: str = ""
    forecast_at: datetime | None = None


class WhyOut(BaseModel):
    job_id: str
    status: str
    last_considered_at: datetime | None
    summary: str
    reasons: list[ReasonOut]
    # For a queued job: its place in its team's queue (1: next) of ``queue_length``.
    queue_position: int | None = None
    queue_length: int | None = None
    waits_for: list[BlockerOut] = Field(default_factory=list)
    estimate: EstimateOut | None = None


class TeamQuotaOut(BaseModel):
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None
    used: int
    borrowed: int


class TeamOut(BaseModel):
    name: str
    cohort: str | None
    weight: float
    quota: dict[str, TeamQuotaOut]
    queued: int
    running: int
    members: dict[str, str] | None = None
    # This calendar month (accounting timezone), as ``sshare`` shows usage: the team's
    # GPU-hours, their share of all teams' GPU-hours, and its tightest budget's remaining.
    usage_gpu_hours: float = 0.0
    usage_share: float = 0.0
    budget_remaining: float | None = None
    budget_unit: str | None = None
    budget_status: str | None = None


class TeamList(BaseModel):
    items: list[TeamOut]


class PoolScaleOut(BaseModel):
    """An autoscaled pool's nodes now (the controller's autoscaler; docs/autoscaling.md)."""

    target: int
    ready: int
    provisioning: int
    draining: int
    reason: str = ""


class PoolOut(BaseModel):
    name: str
    backend: str
    gpu_type: str
    nodes: int
    gpus_per_node: int
    gpus_total: int
    gpus_allocated: int
    dedicated_to: str | None
    available: bool = True  # False while its backend is unreachable and being retried
    message: str = ""
    # Autoscaled pools the controller sizes: where it stands (None: fixed, or not known to
    # this process: an API replica has no controller). ``nodes`` is then the most it may have.
    autoscale: PoolScaleOut | None = None


class PoolList(BaseModel):
    items: list[PoolOut]


class WhoAmI(BaseModel):
    user: str
    platform_admin: bool
    teams: dict[str, str]
    auditor: bool = False  # reads every team's usage and costs


class ErrorBody(BaseModel):
    code: str
    message: str
    details: Any = None


class ErrorOut(BaseModel):
    error: ErrorBody


class AuditOut(BaseModel):
    id: int
    at: datetime
    actor: str
    token_id: str | None
    action: str
    target: str
    team: str | None
    outcome: str
    status: int | None


class AuditPage(BaseModel):
    items: list[AuditOut]
    next_cursor: str | None
