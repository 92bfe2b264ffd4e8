"""Read models for API answers (docs/architecture.md §7).

Read models ignore unknown fields and give every field the server may add later a default
(docs/code-style.md §10), so an older SDK keeps working against a newer server. They are
frozen: a model is a record of what the server said, not something to edit and send back.
Write bodies are built as plain dicts in ``gpupool.client.wire``; the server's write models
reject unknown fields.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# "cancelling": the job was asked to stop and has its grace period to do so (it is still
# admitted or running on its backend until its attempt ends).
JobStatus = Literal[
    "queued",
    "admitted",
    "running",
    "cancelling",
    "succeeded",
    "failed",
    "cancelled",
    "preempted",
    "lost",
    "evicted",
]
# Terminal states: the job will not run again (a lost attempt is requeued).
FINISHED_STATUSES = frozenset({"succeeded", "failed", "cancelled"})


class ReadModel(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_means_default(cls, data: Any) -> Any:
        # The server sends null for parts it leaves out of a listing (attempts, members):
        # read those as the field's default rather than failing.
        if not isinstance(data, dict):
            return data
        required_or_defaulted = {
            name
            for name, field in cls.model_fields.items()
            if field.default is not None or field.default_factory is not None
        }
        return {k: v for k, v in data.items() if v is not None or k not in required_or_defaulted}


class Resources(ReadModel):
    gpus: int = 1
    gpu_types: list[str] | None = None
    nodes: int = 1
    cpus: float | None = None
    memory_gb: float | None = None


class Attempt(ReadModel):
    number: int
    status: str
    pool: str | None = None
    gpu_type: str | None = None
    devices: list[list[int]] = Field(default_factory=list)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    message: str = ""


class Mount(ReadModel):
    source: str
    target: str
    read_only: bool = False


class Container(ReadModel):
    mounts: list[Mount] = Field(default_factory=list)
    shm_size_gb: float | None = None
    read_only_root: bool = False


class Job(ReadModel):
    id: str
    name: str = ""
    team: str = ""
    user: str = ""
    # A plain str, not JobStatus: a status added by a newer server must not break parsing.
    status: str
    priority_class: str = ""
    priority: int = 0
    kind: str = ""
    backend: str = ""
    command: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    resources: Resources = Resources()
    max_runtime_s: int | None = None
    checkpoint_interval_s: int | None = None
    image: str | None = None
    image_pull_secret: str | None = None
    container: Container | None = None
    inputs: list[str] = Field(default_factory=list)
    outputs: list[str] = Field(default_factory=list)
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempt: int = 0
    pool: str | None = None
    gpu_type: str | None = None
    exit_code: int | None = None
    message: str = ""
    # Only ``GET /v1/jobs/{id}`` fills this; list answers leave it empty.
    attempts: list[Attempt] = Field(default_factory=list)
    # Tasks of a job array: the array's id and this task's index (the id is <array>_<index>).
    array_id: str | None = None
    array_index: int | None = None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED_STATUSES


class Page(ReadModel):
    """One page of ``GET /v1/jobs``; pass ``next_cursor`` back to get the next one."""

    items: list[Job] = Field(default_factory=list)
    next_cursor: str | None = None
    # Grouped pages (``group=True``): tasks per status of each array on the page.
    arrays: dict[str, dict[str, int]] = Field(default_factory=dict)


class JobArray(ReadModel):
    """A job array: ``count`` tasks, ids ``<id>_<index>``, with tasks per status."""

    id: str
    name: str = ""
    team: str = ""
    user: str = ""
    count: int = 0
    first_index: int = 0
    last_index: int = 0
    submitted_at: datetime | None = None
    counts: dict[str, int] = Field(default_factory=dict)

    def task_id(self, index: int) -> str:
        return f"{self.id}_{index}"


class Reason(ReadModel):
    gpu_type: str = ""
    code: str = ""
    message: str = ""


class Blocker(ReadModel):
    """Something a queued job waits for: ``queue``, ``running``, ``queued`` or ``quota``;
    ``jobs`` names only jobs of teams the caller may read."""

    kind: str = ""
    message: str = ""
    count: int = 0
    gpus: int = 0
    gpu_type: str | None = None
    jobs: list[str] = Field(default_factory=list)


class StartEstimate(ReadModel):
    """When a queued job is expected to start, its range, and how that was estimated."""

    start_at: datetime | None = None
    earliest: datetime | None = None
    latest: datetime | None = None
    pool: str | None = None
    gpu_type: str | None = None
    method: str = "none"
    basis: str = ""
    forecast_at: datetime | None = None


class WhyReport(ReadModel):
    job_id: str
    status: str
    last_considered_at: datetime | None = None
    summary: str = ""
    reasons: list[Reason] = Field(default_factory=list)
    queue_position: int | None = None
    queue_length: int | None = None
    waits_for: list[Blocker] = Field(default_factory=list)
    estimate: StartEstimate | None = None


class TeamQuota(ReadModel):
    nominal: int = 0
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    used: int = 0
    borrowed: int = 0


class Team(ReadModel):
    name: str
    cohort: str | None = None
    weight: float = 1.0
    quota: dict[str, TeamQuota] = Field(default_factory=dict)
    # Only ``GET /v1/teams/{team}`` fills this.
    members: dict[str, str] = Field(default_factory=dict)
    queued: int = 0
    running: int = 0
    # This month: GPU-hours, share of all teams' GPU-hours, tightest budget's remaining.
    usage_gpu_hours: float = 0.0
    usage_share: float = 0.0
    budget_remaining: float | None = None
    budget_unit: str | None = None
    budget_status: str | None = None


class PoolScale(ReadModel):
    """Where an autoscaled pool stands: its target and its nodes by phase."""

    target: int = 0
    ready: int = 0
    provisioning: int = 0
    draining: int = 0
    reason: str = ""


class Pool(ReadModel):
    name: str
    backend: str = ""
    gpu_type: str = ""
    nodes: int = 0
    gpus_per_node: int = 0
    gpus_total: int = 0
    gpus_allocated: int = 0
    dedicated_to: str | None = None
    available: bool = True  # False while its backend is unreachable or refuses the pool
    message: str = ""  # why it is unavailable
    autoscale: PoolScale | None = None  # autoscaled pools: nodes is then the most it may have


class ApiToken(ReadModel):
    """One of a user's API tokens (never its secret)."""

    id: str
    user: str
    description: str = ""
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None


class NewApiToken(ApiToken):
    token: str  # the bearer token, shown this once


class WhoAmI(ReadModel):
    user: str
    platform_admin: bool = False
    teams: dict[str, str] = Field(default_factory=dict)
    auditor: bool = False  # reads every team's usage and costs


class AuditEntry(ReadModel):
    """One recorded mutation: ``outcome`` is ``ok`` or the error code it was answered with."""

    id: int
    at: datetime | None = None
    actor: str = ""
    token_id: str | None = None
    action: str = ""
    target: str = ""
    team: str | None = None
    outcome: str = ""
    status: int | None = None


class AuditPage(ReadModel):
    """One page of ``GET /v1/audit``, newest first; pass ``next_cursor`` back for the next."""

    items: list[AuditEntry] = Field(default_factory=list)
    next_cursor: str | None = None


class ConfigChange(ReadModel):
    """One change of a configuration diff; ``text`` is it as one readable line."""

    kind: str = ""
    section: str = ""
    name: str = ""
    path: list[str] = Field(default_factory=list)
    old: Any = None
    new: Any = None
    text: str = ""


class JobInUse(ReadModel):
    """A queued or running job of a team or pool that a configuration change removes."""

    id: str
    team: str = ""
    status: str = ""
    pool: str | None = None


class ConfigDiff(ReadModel):
    """``POST /v1/config/diff``: what a file would change against ``base_version``."""

    base_version: int = 0
    changes: list[ConfigChange] = Field(default_factory=list)
    text: str = ""
    summary: str = ""
    jobs_in_use: list[JobInUse] = Field(default_factory=list)


class ConfigVersion(ReadModel):
    """One stored configuration version (``yaml`` only from ``GET /v1/config``)."""

    version: int
    applied_at: datetime | None = None
    applied_by: str = ""
    source: str = ""
    summary: str = ""
    digest: str = ""
    yaml: str | None = None


class ConfigApplied(ReadModel):
    """``POST /v1/config``: the version now in force; ``applied`` is False for no change."""

    version: int
    applied: bool = False
    diff: ConfigDiff = Field(default_factory=ConfigDiff)
    failed_jobs: int = 0
    cancelled_jobs: int = 0


def dump(model: BaseModel) -> dict[str, Any]:
    """JSON-ready dict of a read model (datetimes as ISO strings)."""
    return model.model_dump(mode="json")


class BudgetStatus(ReadModel):
    """How one team budget stands in its current period (``GET /v1/budgets``)."""

    team: str
    name: str
    period: str = "month"
    period_label: str = ""
    period_start: datetime | None = None
    period_end: datetime | None = None
    gpu_type: str | None = None
    unit: str = "GPU-h"
    used: float = 0.0
    limit: float = 0.0
    remaining: float = 0.0
    percent: float = 0.0
    status: str = "ok"  # ok | warning | over
    enforcement: str = "alert"
    enforced: bool = False
    thresholds: list[float] = Field(default_factory=list)
    reached: list[float] = Field(default_factory=list)


class BudgetSet(ReadModel):
    """The configuration version a ``budget set`` stored (``applied`` False: no change)."""

    version: int
    applied: bool = False
    summary: str = ""


class WebhookDelivery(ReadModel):
    """One try to deliver a webhook message (``GET /v1/webhooks/deliveries``)."""

    id: int
    message_id: int
    webhook: str
    event: str = ""
    try_number: int = 1
    at: datetime | None = None
    outcome: str = ""  # delivered | retry | failed
    status_code: int | None = None
    error: str = ""
    duration_ms: float = 0.0
