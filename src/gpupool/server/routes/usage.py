"""/v1/usage and /v1/costs: the usage summary or per-attempt detail, as JSON or CSV (C1, C2).

CSV is chosen by ``Accept: text/csv`` or ``format=csv``; JSON is the default.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel

from gpupool.server.deps import PrincipalDep, RuntimeDep
from gpupool.server.routes.jobs import ERRORS
from gpupool.server.services.usage import ReportQuery
from gpupool.server.usage_csv import attempts_csv, summary_csv
from gpupool.server.usage_schemas import CostAttempts, CostSummary, UsageAttempts, UsageSummary

router = APIRouter(prefix="/v1", tags=["usage"])

Report = Literal["summary", "attempts"]
Format = Literal["json", "csv"]


def _query(
    team: Annotated[str | None, Query(max_length=100)] = None,
    from_: Annotated[
        str | None,
        Query(alias="from", max_length=64, description="Start (ISO 8601 date or time)."),
    ] = None,
    to: Annotated[
        str | None, Query(max_length=64, description="End, exclusive (default: now).")
    ] = None,
    period: Annotated[
        str | None,
        Query(
            max_length=20,
            description="day, week, month, quarter or year: the one holding `at`, or the "
            "pieces of from/to.",
        ),
    ] = None,
    at: Annotated[
        str | None, Query(max_length=20, description="A date (YYYY-MM-DD) in the period.")
    ] = None,
    group_by: Annotated[
        str | None,
        Query(
            max_length=100,
            description="Comma-separated: team, user, gpu_type, pool, priority_class "
            "(default team,gpu_type).",
        ),
    ] = None,
) -> ReportQuery:
    return ReportQuery(team, from_, to, period, at, group_by)


def _wants_csv(request: Request, fmt: Format | None) -> bool:
    if fmt is not None:
        return fmt == "csv"
    return "text/csv" in request.headers.get("accept", "")


def _csv(text: str, name: str) -> Response:
    return Response(
        text,
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}.csv"'},
    )


def _answer(
    request: Request, fmt: Format | None, body: BaseModel, name: str
) -> BaseModel | Response:
    if not _wants_csv(request, fmt):
        return body
    if isinstance(body, UsageSummary):
        return _csv(summary_csv(body), name)
    assert isinstance(body, UsageAttempts)
    return _csv(attempts_csv(body), name)


QueryDep = Annotated[ReportQuery, Depends(_query)]
ReportParam = Annotated[
    Report, Query(description="summary (grouped totals) or attempts (one line per attempt).")
]
FormatParam = Annotated[
    Format | None, Query(alias="format", description="csv or json; else by the Accept header.")
]
LimitParam = Annotated[int, Query(ge=1, le=10_000, description="Attempts per page.")]
CursorParam = Annotated[str | None, Query(max_length=40)]


@router.get(
    "/usage",
    response_model=UsageSummary | UsageAttempts,
    responses=ERRORS,
    name="usage.report",
)
def usage(
    request: Request,
    runtime: RuntimeDep,
    principal: PrincipalDep,
    query: QueryDep,
    report: ReportParam = "summary",
    fmt: FormatParam = None,
    limit: LimitParam = 1000,
    cursor: CursorParam = None,
) -> BaseModel | Response:
    """GPU-hours within quota, borrowed and idle share, per period and group (or attempt)."""
    body: BaseModel
    if report == "attempts":
        body = runtime.usage.usage_attempts(principal, query, limit=limit, cursor=cursor)
    else:
        body = runtime.usage.usage(principal, query)
    return _answer(request, fmt, body, f"usage-{report}")


@router.get(
    "/costs",
    response_model=CostSummary | CostAttempts,
    responses=ERRORS,
    name="costs.report",
)
def costs(
    request: Request,
    runtime: RuntimeDep,
    principal: PrincipalDep,
    query: QueryDep,
    report: ReportParam = "summary",
    fmt: FormatParam = None,
    limit: LimitParam = 1000,
    cursor: CursorParam = None,
) -> BaseModel | Response:
    """Chargeback and showback: the usage report priced in the configured currency."""
    body: BaseModel
    if report == "attempts":
        body = runtime.usage.cost_attempts(principal, query, limit=limit, cursor=cursor)
    else:
        body = runtime.usage.costs(principal, query)
    return _answer(request, fmt, body, f"costs-{report}")
