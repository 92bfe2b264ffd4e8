"""Wire schemas of /v1/usage and /v1/costs: summary rows, attempt lines, missing spans.

GPU time is sent in GPU-hours (the ledger's integer milliseconds / 3,600,000). ``/v1/usage``
rows carry time only; ``/v1/costs`` rows add costs in the configuration's currency.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel


class MissingOut(BaseModel):
    """A span with no ledger data: unknown use, not zero."""

    start: datetime
    end: datetime
    reason: str


class UsageRowOut(BaseModel):
    period: str
    period_start: datetime
    period_end: datetime
    team: str | None = None
    user: str | None = None
    gpu_type: str | None = None
    pool: str | None = None  # grouped by pool, or the pool of an (idle) row
    priority_class: str | None = None
    allocated_gpu_hours: float  # within the team's nominal quota
    borrowed_gpu_hours: float
    idle_gpu_hours: float  # this row's share of idle capacity (accounting.idle_cost)


class CostRowOut(UsageRowOut):
    allocated_cost: float
    borrowed_cost: float
    idle_cost: float
    total_cost: float
    unpriced: bool  # some of the row's GPUs have no price in the configuration


class UsageAttemptOut(BaseModel):
    attempt_id: int
    job_id: str
    job_name: str
    team: str
    user: str
    gpu_type: str
    pool: str
    backend: str
    priority_class: str
    node_type: str
    gpus: int
    borrowed: int
    started_at: datetime
    ended_at: datetime | None
    outcome: str | None  # None while running
    allocated_gpu_hours: float  # within the report's range
    borrowed_gpu_hours: float


class CostAttemptOut(UsageAttemptOut):
    allocated_cost: float
    borrowed_cost: float
    total_cost: float
    unpriced: bool


class _Report(BaseModel):
    start: datetime
    end: datetime
    timezone: str
    generated_at: datetime
    missing: list[MissingOut]


class UsageSummary(_Report):
    report: str = "summary"
    group_by: list[str]
    idle_cost: str  # how idle capacity is shared: unshared | proportional | even
    rows: list[UsageRowOut]


class CostSummary(UsageSummary):
    currency: str
    rows: list[CostRowOut]  # type: ignore[assignment]


class UsageAttempts(_Report):
    report: str = "attempts"
    items: list[UsageAttemptOut]
    next_cursor: str | None


class CostAttempts(UsageAttempts):
    currency: str
    items: list[CostAttemptOut]  # type: ignore[assignment]
