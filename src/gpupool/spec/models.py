"""Pydantic models of the cluster configuration YAML (docs/architecture.md §4).

Field-level rules live on the models; rules that relate sections to each other (a pool's
gpu type must exist, a member must be a user, ...) live in ``gpupool.spec.checks`` so that
every problem of a file can be reported at once with its line. Unknown keys are errors.
"""

from __future__ import annotations

from datetime import date
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

BACKENDS = ("local", "slurm", "ray", "kubernetes", "azure-batch", "azure-ml")
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"

Role = Literal["admin", "member", "viewer"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuType(_Strict):
    price_per_gpu_hour: float = Field(default=0.0, ge=0)
    spot_price_per_gpu_hour: float | None = Field(default=None, ge=0)
    fair_share_weight: float | None = Field(
        default=None,
        ge=0,
        description="What one GPU of this type counts in the fair share; default: its "
        "price_per_gpu_hour (every type counts 1 when no type has a price).",
    )


class NodeShape(_Strict):
    gpus: int = Field(ge=0, le=64)
    cpus: float = Field(default=8, gt=0)
    memory_gb: float = Field(default=32, gt=0)


class Autoscale(_Strict):
    mode: Literal["fixed", "autoscale"] = "fixed"
    min_nodes: int = Field(default=0, ge=0)
    max_nodes: int | None = Field(default=None, ge=0)
    node_type: Literal["dedicated", "spot"] = "dedicated"
    warm_nodes: int = Field(
        default=0, ge=0, description="Nodes kept up while idle (a warm floor for scarce tiers)."
    )
    idle_timeout_s: int = Field(
        default=600, gt=0, description="Idle time before the pool scales down to its floor."
    )


class Pool(_Strict):
    name: str = Field(pattern=NAME_PATTERN)
    backend: Literal["local", "slurm", "ray", "kubernetes", "azure-batch", "azure-ml"]
    gpu_type: str
    nodes: int = Field(default=1, ge=1, le=100_000)
    node: NodeShape
    autoscale: Autoscale = Autoscale()
    dedicated_to: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    price_per_gpu_hour: float | None = Field(
        default=None,
        ge=0,
        description="Overrides the gpu type's price (dedicated or spot) for this pool's GPUs.",
    )
    data_access: Literal["pool-identity", "grant"] = Field(
        default="pool-identity",
        description="grant: each attempt gets short-lived URLs scoped to its inputs and "
        "outputs (docs/architecture.md §8); pool-identity: the legacy mode, the pool's own access.",
    )


class Storage(_Strict):
    """Where teams' data lives and how long grants to it last (docs/architecture.md §8).

    ``root`` is a local directory (each team under ``<root>/<team>``), ``az://<account>``
    (one container per team, named after it) or ``s3://<bucket>[/<prefix>]`` (each team
    under ``<prefix>/<team>/``); ``teams`` gives one team a root URI of its own
    (``az://<account>/<container>``, ``s3://<bucket>/<prefix>``, a directory).
    """

    root: str | None = Field(default=None, description="Default: <GPUPOOL_HOME>/storage.")
    teams: dict[str, str] = Field(default_factory=dict)
    endpoint: str | None = Field(
        default=None, description="Blob or S3 endpoint URL, for Azurite, MinIO or a proxy."
    )
    region: str | None = Field(default=None, description="S3 region for presigned URLs.")
    grant_margin_s: int = Field(default=600, ge=0, le=24 * 3600)
    grant_default_runtime_s: int = Field(
        default=24 * 3600, gt=0, le=7 * 24 * 3600, description="For jobs without max_runtime_s."
    )


class PriorityClass(_Strict):
    value: int
    default: bool = False
    min_runtime_s: float = Field(
        default=0.0,
        ge=0,
        description="A job of this class is not preempted before it has run this long, "
        "except to give a team GPUs of its own nominal quota back (reclaim).",
    )


class BorrowWithinCohort(_Strict):
    policy: Literal["never", "lower_priority"] = "never"
    max_priority_threshold: int | None = Field(
        default=None, description="Only victims with priority <= this value (None: any)."
    )


class Preemption(_Strict):
    """What a job may preempt to fit (docs/architecture.md §5.6). Defaults follow Kueue's common
    setup: preempt lower priority within the team, reclaim lent quota from anyone, and never
    preempt to borrow."""

    within_team: Literal["never", "lower_priority"] = "lower_priority"
    reclaim: Literal["never", "lower_priority", "any"] = "any"
    borrow_within_cohort: BorrowWithinCohort = BorrowWithinCohort()


class Cohort(_Strict):
    description: str = ""
    preemption: Preemption = Preemption()


class Quota(_Strict):
    """GPUs of one type for one team, and a cap on its GPU-less work on the type's pools.

    ``nominal`` is guaranteed. ``borrowing_limit`` caps what the team may use above nominal
    from its cohort (``None`` = no cap). ``lending_limit`` caps how much of its unused
    nominal the cohort may borrow (``None`` = all of it).

    ``cpus`` and ``memory_gb`` cap what the team's GPU-less jobs (``gpus: 0``) hold on the
    type's pools at once, cpus x nodes and memory x nodes summed, each node counting at least
    one CPU. A hard cap: GPU-less work never borrows. Unset, they default to the team's share
    of the type (:meth:`ClusterConfig.gpuless_caps`); on the ``cpu`` type, which has no GPUs,
    that is nothing, so a team runs jobs on ``cpu`` pools only with ``cpus`` set there.
    """

    nominal: int = Field(default=0, ge=0)
    borrowing_limit: int | None = Field(default=None, ge=0)
    lending_limit: int | None = Field(default=None, ge=0)
    cpus: float | None = Field(
        default=None,
        ge=0,
        description="CPUs the team's GPU-less jobs may hold on this type's pools at once; "
        "default: nominal x the type's CPUs per GPU (0 on the cpu type).",
    )
    memory_gb: float | None = Field(
        default=None,
        ge=0,
        description="GB the team's GPU-less jobs may hold on this type's pools at once; "
        "default: the cpus cap x the type's memory per CPU.",
    )


class Budget(_Strict):
    """A team's limit on what it uses in a period (C3), in GPU-hours or in money.

    ``period``: ``month``, ``week`` (from ``accounting.week_start``), ``quarter`` (of the
    fiscal year, ``accounting.fiscal_year_start``), all cut in ``accounting.timezone``; or
    ``custom``, from the first day ``start`` to the last day ``end`` (both included). Exactly one
    of ``gpu_hours`` and ``amount`` (in ``accounting.currency``) is the limit. ``gpu_type``
    counts only that type's GPUs. Each threshold (percent of the limit) alerts once per period;
    at 100 % ``enforcement`` applies until the period ends or the limit is raised: ``alert``
    only alerts, ``no-borrow`` keeps the team within its nominal quota, ``hold`` admits none of
    its new jobs (running work continues).
    """

    name: str = Field(pattern=NAME_PATTERN)
    period: Literal["month", "week", "quarter", "custom"] = "month"
    start: date | None = Field(default=None, description="custom periods: the first day.")
    end: date | None = Field(default=None, description="custom periods: the last day.")
    gpu_hours: float | None = Field(default=None, gt=0)
    amount: float | None = Field(default=None, gt=0, description="In accounting.currency.")
    gpu_type: str | None = Field(default=None, description="Count only this gpu type.")
    thresholds: list[float] = Field(
        default_factory=lambda: [50.0, 80.0, 100.0],
        description="Percent of the limit at which to alert, once per period each.",
    )
    enforcement: Literal["alert", "no-borrow", "hold"] = "alert"


class Team(_Strict):
    cohort: str | None = None
    weight: float = Field(default=1.0, gt=0)
    quota: dict[str, Quota] = Field(default_factory=dict)
    groups: list[str] = Field(default_factory=list)
    members: dict[str, Role] = Field(default_factory=dict)
    default_priority_class: str | None = None
    gid: int | None = Field(
        default=None,
        ge=1,
        le=2**31 - 2,
        description="POSIX group of the team's storage: owns shared/, added to its jobs' groups.",
    )
    budgets: list[Budget] = Field(default_factory=list)


class User(_Strict):
    uid: int = Field(ge=0)
    gid: int = Field(ge=0)
    groups: list[int] = Field(default_factory=list)
    platform_admin: bool = False
    auditor: bool = Field(
        default=False,
        description="Reads every team's usage and costs, and nothing else of theirs; "
        "changes nothing.",
    )


class SchedulerSettings(_Strict):
    cycle_interval_s: float = Field(default=1.0, gt=0, le=60)
    grace_period_s: float = Field(default=10.0, ge=0, le=3600)
    gpu_type_order: list[str] = Field(
        default_factory=list,
        description="Order tried for jobs that accept any gpu type; default: config order.",
    )
    preemption: Preemption = Field(default=Preemption(), description="For teams without a cohort.")
    preemption_budget: int = Field(default=10, ge=0, le=10_000, description="Victims per cycle.")
    max_preemptions_per_job: int | None = Field(
        default=3,
        ge=0,
        description="A job preempted this often is preempted again only to give a team GPUs of "
        "its own nominal quota back (reclaim); null: no cap.",
    )
    fair_share_half_life_s: float = Field(default=3600.0, gt=0, le=90 * 24 * 3600)
    starvation_after_s: float | None = Field(
        default=1800.0, gt=0, description="Waiting longer earns a reservation; null: never."
    )
    queueing: Literal["best_effort_fifo", "strict_fifo"] = Field(
        default="best_effort_fifo",
        description="strict_fifo: nothing of a team starts while its first job waits.",
    )
    requeue_unreachable_after_s: float | None = Field(
        default=600.0,
        gt=0,
        description="An admitted job whose pool's backend has not answered for this long goes "
        "back to the queue and frees its quota; null: it waits for the backend.",
    )


class Webhook(_Strict):
    """Where budget alerts are POSTed. The signing secret is read from the environment
    variable ``secret_env`` of the server process, never from this file (which is stored and
    shown in the configuration history)."""

    name: str = Field(pattern=NAME_PATTERN)
    url: str = Field(pattern=r"^https?://\S+$", description="http:// or https:// URL.")
    secret_env: str | None = Field(
        default=None,
        pattern=r"^[A-Z_][A-Z0-9_]*$",
        description="Environment variable holding the HMAC-SHA256 signing secret.",
    )


class Accounting(_Strict):
    """How usage is priced and cut into periods (C2). Prices live on the gpu types."""

    currency: str = Field(default="USD", description="ISO 4217 code of every price.")
    timezone: str = Field(default="UTC", description="IANA zone in which days and months start.")
    week_start: Literal[
        "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"
    ] = "monday"
    fiscal_year_start: int = Field(default=1, ge=1, le=12, description="Month (1-12).")
    idle_cost: Literal["unshared", "proportional", "even"] = Field(
        default="unshared",
        description="A pool's idle GPU cost: left on its own row, spread over teams by their "
        "use of the pool, or split evenly over the teams that have quota of its gpu type.",
    )
    accrual_interval_s: float = Field(
        default=60.0,
        ge=1,
        le=3600,
        description="How often the controller adds running attempts' time to the ledger; "
        "reports always include running attempts up to now.",
    )
    gap_after_s: float | None = Field(
        default=None,
        gt=0,
        le=7 * 24 * 3600,
        description="A controller that finds the ledger last accrued longer ago than this "
        "records the span as a gap (missing data, no capacity); default: 3 x "
        "accrual_interval_s + 30 s.",
    )
    webhooks: list[Webhook] = Field(
        default_factory=list, description="Targets of budget alerts (POST, signed JSON)."
    )


class ClusterConfig(_Strict):
    gpu_types: dict[str, GpuType]
    pools: list[Pool] = Field(default_factory=list)
    priority_classes: dict[str, PriorityClass] = Field(
        default_factory=lambda: {"default": PriorityClass(value=0, default=True)}
    )
    cohorts: dict[str, Cohort] = Field(default_factory=dict)
    teams: dict[str, Team] = Field(default_factory=dict)
    users: dict[str, User] = Field(default_factory=dict)
    platform_admin_groups: list[str] = Field(
        default_factory=list,
        description="Identity-provider (or directory file) groups whose members are platform "
        "admins, besides users with platform_admin: true.",
    )
    scheduler: SchedulerSettings = SchedulerSettings()
    storage: Storage = Storage()
    accounting: Accounting = Accounting()

    def default_priority_class(self, team: str | None = None) -> str:
        """The class a job gets when it names none: the team's, else the global default."""
        if team is not None and team in self.teams:
            own = self.teams[team].default_priority_class
            if own is not None:
                return own
        for name, cls in self.priority_classes.items():
            if cls.default:
                return name
        return min(self.priority_classes, key=lambda n: self.priority_classes[n].value)

    def gpuless_caps(self) -> dict[str, dict[str, tuple[float, float]]]:
        """Per team and gpu type, the ``(CPUs, GB)`` its GPU-less jobs may hold on the type's pools.

        Unset, ``cpus`` is the team's nominal share of the type's CPUs (nominal x the CPUs per
        GPU of the type's pools, all nodes summed; nothing on a type without GPUs) and
        ``memory_gb`` the same share of its memory as the CPU cap is of its CPUs (cpus x the
        memory per CPU). Every gpu type gets an entry: a team without a quota entry for a type
        may run no GPU-less work there, never an unbounded amount.
        """
        per_gpu: dict[str, tuple[float, float]] = {}  # (CPUs per GPU, GB per CPU) of each type
        for gpu_type in self.gpu_types:
            pools = [pool for pool in self.pools if pool.gpu_type == gpu_type]
            gpus = sum(pool.nodes * pool.node.gpus for pool in pools)
            cpus = sum(pool.nodes * pool.node.cpus for pool in pools)
            memory = sum(pool.nodes * pool.node.memory_gb for pool in pools)
            per_gpu[gpu_type] = (cpus / gpus if gpus else 0.0, memory / cpus if cpus else 0.0)
        caps: dict[str, dict[str, tuple[float, float]]] = {}
        for name, team in self.teams.items():
            caps[name] = {}
            for gpu_type, (cpus_per_gpu, memory_per_cpu) in per_gpu.items():
                quota = team.quota.get(gpu_type, Quota())
                cpus = quota.nominal * cpus_per_gpu if quota.cpus is None else quota.cpus
                memory = cpus * memory_per_cpu if quota.memory_gb is None else quota.memory_gb
                caps[name][gpu_type] = (cpus, memory)
        return caps

    def min_runtimes(self) -> dict[int, float]:
        """Per priority value, the minimum run time before preemption (the running jobs carry
        their priority's value): the longest of the classes with that value."""
        runtimes: dict[int, float] = {}
        for cls in self.priority_classes.values():
            if cls.min_runtime_s > 0:
                runtimes[cls.value] = max(runtimes.get(cls.value, 0.0), cls.min_runtime_s)
        return runtimes

    def fair_share_weights(self) -> dict[str, float]:
        """What one GPU of each type counts in the fair share: its ``fair_share_weight``, else
        its price per GPU-hour; when no type has either, every type counts 1."""
        priced = any(t.price_per_gpu_hour > 0 for t in self.gpu_types.values())
        weights = {}
        for name, gpu_type in self.gpu_types.items():
            if gpu_type.fair_share_weight is not None:
                weights[name] = gpu_type.fair_share_weight
            else:
                weights[name] = gpu_type.price_per_gpu_hour if priced else 1.0
        return weights

    def gpu_type_order(self) -> list[str]:
        """Preference order for jobs that accept any gpu type."""
        order = [t for t in self.scheduler.gpu_type_order if t in self.gpu_types]
        return order + [t for t in self.gpu_types if t not in order]
