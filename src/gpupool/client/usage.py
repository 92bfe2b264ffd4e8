"""Read models of ``GET /v1/usage`` and ``/v1/costs``, and how the SDK asks for a report.

One row model serves both routes: the cost fields are ``None`` in a usage report. GPU time is
in GPU-hours. ``missing`` lists the spans the server has no data for (not zero use).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from pydantic import Field

from gpupool.client.models import ReadModel
from gpupool.client.wire import API, drop_none

TimeLike = datetime | date | str


class MissingSpan(ReadModel):
    start: datetime
    end: datetime
    reason: str = ""


class UsageRow(ReadModel):
    period: str = ""
    period_start: datetime | None = None
    period_end: datetime | None = None
    team: str | None = None
    user: str | None = None
    gpu_type: str | None = None
    pool: str | None = None
    priority_class: str | None = None
    allocated_gpu_hours: float = 0.0
    borrowed_gpu_hours: float = 0.0
    idle_gpu_hours: float = 0.0
    allocated_cost: float | None = None
    borrowed_cost: float | None = None
    idle_cost: float | None = None
    total_cost: float | None = None
    unpriced: bool = False


class UsageReport(ReadModel):
    """A summary: one row per period and group (``group_by``)."""

    start: datetime | None = None
    end: datetime | None = None
    timezone: str = "UTC"
    group_by: list[str] = Field(default_factory=list)
    idle_cost: str = ""
    currency: str | None = None  # set on a cost report
    rows: list[UsageRow] = Field(default_factory=list)
    missing: list[MissingSpan] = Field(default_factory=list)


class UsageAttempt(ReadModel):
    attempt_id: int
    job_id: str = ""
    job_name: str = ""
    team: str = ""
    user: str = ""
    gpu_type: str = ""
    pool: str = ""
    backend: str = ""
    priority_class: str = ""
    node_type: str = ""
    gpus: int = 0
    borrowed: int = 0
    started_at: datetime | None = None
    ended_at: datetime | None = None
    outcome: str | None = None
    allocated_gpu_hours: float = 0.0
    borrowed_gpu_hours: float = 0.0
    allocated_cost: float | None = None
    borrowed_cost: float | None = None
    total_cost: float | None = None
    unpriced: bool = False


class UsageAttemptPage(ReadModel):
    """One page of the detailed report, by attempt id; pass ``next_cursor`` back for more."""

    start: datetime | None = None
    end: datetime | None = None
    currency: str | None = None
    items: list[UsageAttempt] = Field(default_factory=list)
    next_cursor: str | None = None
    missing: list[MissingSpan] = Field(default_factory=list)


def _text(value: TimeLike | None) -> str | None:
    return value.isoformat() if isinstance(value, date) else value


def report_params(
    *,
    team: str | None = None,
    start: TimeLike | None = None,
    end: TimeLike | None = None,
    period: str | None = None,
    at: date | str | None = None,
    group_by: str | list[str] | None = None,
) -> dict[str, Any]:
    """The query of a report; ``start``/``end`` are sent as ``from``/``to``."""
    if isinstance(group_by, list):
        group_by = ",".join(group_by)
    return drop_none(
        {
            "team": team,
            "from": _text(start),
            "to": _text(end),
            "period": period,
            "at": _text(at),
            "group_by": group_by,
        }
    )


def attempts_request(
    costs: bool, limit: int, cursor: str | None, query: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """The path and query of one page of the per-attempt report."""
    params = {**report_params(**query), "report": "attempts", "limit": limit}
    if cursor is not None:
        params["cursor"] = cursor
    return f"{API}/{'costs' if costs else 'usage'}", params
