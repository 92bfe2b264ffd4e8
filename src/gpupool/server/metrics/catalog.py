"""Every metric gpupool exports: name, type, labels and meaning, in one table.

Names and labels follow Kueue's where the meaning matches (``kueue_pending_workloads`` is
``gpupool_pending_jobs``, a ClusterQueue is a team, a ResourceFlavor a gpu type). The README's
table of metrics is checked against this one, and the exporter builds every family from it, so
a metric cannot be exported without being described.

Cardinality is bounded by the configuration: labels are teams, gpu types, pools, backends,
reasons, operations, error classes and route templates, never a job id, a user or a raw path.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class MetricSpec:
    name: str
    kind: Kind
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()


# Seconds: a cycle or a step takes milliseconds; a slow one on a large cluster a second or more.
FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Seconds from entering the queue to admission: from at once to a day.
WAIT_BUCKETS = (0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0, 86400.0)

PENDING = MetricSpec(
    "gpupool_pending_jobs",
    Kind.GAUGE,
    ("team", "gpu_type", "reason"),
    "Queued jobs, by the reason they wait on their first gpu type (undecided: not yet seen "
    "by a cycle).",
)
ADMITTED = MetricSpec(
    "gpupool_admitted_jobs",
    Kind.GAUGE,
    ("team", "gpu_type"),
    "Jobs admitted and holding GPUs whose attempt has not started running yet.",
)
RUNNING = MetricSpec(
    "gpupool_running_jobs",
    Kind.GAUGE,
    ("team", "gpu_type"),
    "Jobs whose attempt runs on a backend.",
)
NOMINAL = MetricSpec(
    "gpupool_quota_nominal_gpus",
    Kind.GAUGE,
    ("team", "gpu_type"),
    "The team's guaranteed GPUs of the type (nominal quota).",
)
BORROWING_LIMIT = MetricSpec(
    "gpupool_quota_borrowing_limit_gpus",
    Kind.GAUGE,
    ("team", "gpu_type"),
    "GPUs the team may borrow above nominal; absent when unlimited.",
)
LENDING_LIMIT = MetricSpec(
    "gpupool_quota_lending_limit_gpus",
    Kind.GAUGE,
    ("team", "gpu_type"),
    "GPUs of its nominal the team may lend; absent when unlimited.",
)
USED = MetricSpec(
    "gpupool_quota_used_gpus",
    Kind.GAUGE,
    ("team", "gpu_type"),
    "GPUs the team's admitted and running jobs hold.",
)
BORROWED = MetricSpec(
    "gpupool_quota_borrowed_gpus",
    Kind.GAUGE,
    ("team", "gpu_type"),
    "GPUs the team holds above its nominal, borrowed from its cohort.",
)
LENT = MetricSpec(
    "gpupool_quota_lent_gpus",
    Kind.GAUGE,
    ("team", "gpu_type"),
    "GPUs of the team's idle nominal that its cohort borrows, the cohort's borrowing shared "
    "among lenders in proportion to what each may lend.",
)
POOL_CAPACITY = MetricSpec(
    "gpupool_pool_capacity_gpus",
    Kind.GAUGE,
    ("pool", "gpu_type", "backend"),
    "GPUs of the pool the scheduler plans with (fewer than configured when the backend "
    "reports nodes down).",
)
POOL_ALLOCATED = MetricSpec(
    "gpupool_pool_allocated_gpus",
    Kind.GAUGE,
    ("pool", "gpu_type"),
    "GPUs of the pool held by admitted and running jobs.",
)
POOL_IDLE = MetricSpec(
    "gpupool_pool_idle_gpus",
    Kind.GAUGE,
    ("pool", "gpu_type"),
    "GPUs of the pool that no job holds.",
)
POOL_AVAILABLE = MetricSpec(
    "gpupool_pool_available",
    Kind.GAUGE,
    ("pool", "backend"),
    "1 while the pool's backend answers, 0 while it is backed off as unreachable.",
)
BUDGET_USED = MetricSpec(
    "gpupool_budget_used_ratio",
    Kind.GAUGE,
    ("team", "budget", "enforcement"),
    "Each team budget's use in its current period, as a fraction of its limit (1: used up).",
)
PREEMPTED = MetricSpec(
    "gpupool_preempted_jobs_total",
    Kind.COUNTER,
    ("preempting_team", "reason"),
    "Jobs chosen as preemption victims, by the preemptor's team; reason within_team (a "
    "higher-priority job of the same team) or in_cohort (the victim ran on borrowed quota).",
)
EVICTED = MetricSpec(
    "gpupool_evicted_attempts_total",
    Kind.COUNTER,
    ("pool",),
    "Attempts that ended because the provider took their node back (a spot or low-priority "
    "node reclaimed, a Slurm node set down); each was requeued as a new attempt.",
)
ADMISSIONS = MetricSpec(
    "gpupool_admitted_jobs_total",
    Kind.COUNTER,
    ("team",),
    "Admissions decided.",
)
ADMISSION_WAIT = MetricSpec(
    "gpupool_admission_wait_time_seconds",
    Kind.HISTOGRAM,
    ("team",),
    "Seconds from when a job entered the queue (submit, or its requeue after a preemption or "
    "a lost attempt) to its admission.",
    WAIT_BUCKETS,
)
CYCLE = MetricSpec(
    "gpupool_scheduling_cycle_duration_seconds",
    Kind.HISTOGRAM,
    (),
    "Seconds one scheduling cycle took (the decisions, not reading or writing the store).",
    FAST_BUCKETS,
)
STEP = MetricSpec(
    "gpupool_controller_step_duration_seconds",
    Kind.HISTOGRAM,
    (),
    "Seconds one step of the leading controller took: sync, cancel, schedule, dispatch.",
    FAST_BUCKETS,
)
API = MetricSpec(
    "gpupool_api_request_duration_seconds",
    Kind.HISTOGRAM,
    ("method", "route", "status"),
    "Seconds the API took to answer, by route template (unmatched: no route) and status; a "
    "followed log stream counts until it ends.",
    FAST_BUCKETS,
)
BACKEND_ERRORS = MetricSpec(
    "gpupool_backend_errors_total",
    Kind.COUNTER,
    ("pool", "operation", "error"),
    "Failed backend calls: operation dispatch, poll, cancel or capacity; error unavailable, "
    "rejected, misconfigured, grant (a data grant could not be minted) or other.",
)
LEADER = MetricSpec(
    "gpupool_leader",
    Kind.GAUGE,
    (),
    "1 while this process's controller leads (schedules and dispatches), else 0; absent on "
    "an API-only process.",
)
LEASE_AGE = MetricSpec(
    "gpupool_leader_lease_age_seconds",
    Kind.GAUGE,
    (),
    "Seconds since the controller lease was last renewed, as this process last read it "
    "(PostgreSQL only).",
)
ROLE = MetricSpec(
    "gpupool_process_role",
    Kind.GAUGE,
    ("role",),
    "1, labelled with what this process runs: all, api or controller.",
)

# Exported by the leading controller only (a standby or an API replica would report nothing
# it decides, and summing over processes must not count a job twice).
STATE = (
    PENDING,
    ADMITTED,
    RUNNING,
    NOMINAL,
    BORROWING_LIMIT,
    LENDING_LIMIT,
    USED,
    BORROWED,
    LENT,
    POOL_CAPACITY,
    POOL_ALLOCATED,
    POOL_IDLE,
    POOL_AVAILABLE,
)
EVENTS = (PREEMPTED, EVICTED, ADMISSIONS, ADMISSION_WAIT, CYCLE, STEP, API, BACKEND_ERRORS)
PROCESS = (LEADER, LEASE_AGE, ROLE)
BUDGETS = (BUDGET_USED,)  # the leading controller's last budget evaluation
ALL = (*STATE, *BUDGETS, *EVENTS, *PROCESS)
