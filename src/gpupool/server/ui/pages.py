"""The dashboard's pages: thin routes over the services (``services.dashboard`` and the
services the REST API uses), rendered by the templates of ``ui/templates``.

Authorization is the services' own: a page lists what the principal may read, and a cancel
goes through ``JobService.cancel`` (a viewer's forced POST is refused there with 403).
Every mutating form carries the session's CSRF token, checked before anything else runs.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from gpupool.auth.principal import Action
from gpupool.core.jobs import SHOWN_STATUSES, TERMINAL
from gpupool.server.deps import RuntimeDep
from gpupool.server.services.audit import AuditFilter
from gpupool.server.ui import charts, web
from gpupool.server.usage_csv import summary_csv

router = APIRouter(prefix="/ui", include_in_schema=False)
PAGE = 50
Text = Annotated[str | None, Query(max_length=200)]


def _blank(value: str | None) -> str | None:
    return value.strip() or None if value is not None else None


@router.get("", name="ui.root")
@router.get("/", name="ui.overview")
def overview(request: Request, runtime: RuntimeDep, s: web.SessionDep) -> HTMLResponse:
    session, principal = s
    view = runtime.dashboard.overview(principal)
    return web.render(
        request,
        "overview.html",
        session=session,
        principal=principal,
        view=view,
        capacity_svg=charts.capacity_bars(view.by_type),
    )


@router.get("/teams", name="ui.teams")
def teams(request: Request, runtime: RuntimeDep, s: web.SessionDep) -> HTMLResponse:
    session, principal = s
    views, cohorts = runtime.dashboard.teams(principal)
    return web.render(
        request, "teams.html", session=session, principal=principal, teams=views, cohorts=cohorts
    )


@router.get("/jobs", name="ui.jobs")
def jobs(
    request: Request,
    runtime: RuntimeDep,
    s: web.SessionDep,
    team: Text = None,
    status: Text = None,
    user: Text = None,
    gpu_type: Text = None,
    cursor: Text = None,
) -> HTMLResponse:
    session, principal = s
    config = runtime.current_config()
    filters = {
        "team": _blank(team),
        "status": _blank(status),
        "user": _blank(user),
        "gpu_type": _blank(gpu_type),
    }
    page = runtime.jobs.list(
        principal,
        filters["team"],
        filters["status"],
        PAGE,
        _blank(cursor),
        user=filters["user"],
        gpu_type=filters["gpu_type"],
    )
    return web.render(
        request,
        "jobs.html",
        session=session,
        principal=principal,
        page=page,
        filters=filters,
        paged=cursor is not None,
        teams=principal.readable_teams(sorted(config.teams)),
        statuses=SHOWN_STATUSES,
        gpu_types=sorted(config.gpu_types),
    )


@router.get("/jobs/{job_id}", name="ui.job")
def job(request: Request, runtime: RuntimeDep, job_id: str, s: web.SessionDep) -> HTMLResponse:
    session, principal = s
    found = runtime.jobs.get(principal, job_id)
    return web.render(
        request,
        "job.html",
        session=session,
        principal=principal,
        job=found,
        events=runtime.jobs.timeline(principal, job_id),
        why=runtime.jobs.why(principal, job_id),
        ahead=runtime.jobs.ahead(principal, job_id),
        can_cancel=principal.can(Action.MUTATE, found.team),
        finished=found.status in TERMINAL,
    )


@router.post("/jobs/{job_id}/cancel", name="ui.job.cancel")
async def cancel(request: Request, runtime: RuntimeDep, job_id: str, s: web.SessionDep) -> Response:
    session, principal = s
    web.check_csrf(request, session, await web.form_of(request))
    await run_in_threadpool(runtime.jobs.cancel, principal, job_id)
    return web.redirect(f"/ui/jobs/{job_id}")


@router.get("/pools", name="ui.pools")
def pools(request: Request, runtime: RuntimeDep, s: web.SessionDep) -> HTMLResponse:
    session, principal = s
    return web.render(
        request,
        "pools.html",
        session=session,
        principal=principal,
        pools=runtime.dashboard.pools(principal),
    )


@router.get("/usage", name="ui.usage")
def usage(
    request: Request, runtime: RuntimeDep, s: web.SessionDep, team: Text = None
) -> HTMLResponse:
    session, principal = s
    view = runtime.dashboard.usage(principal, _blank(team))
    return web.render(
        request,
        "usage.html",
        session=session,
        principal=principal,
        view=view,
        team=_blank(team),
        teams=runtime.dashboard.usage_teams(principal),
        chart=charts.usage_bars(view.days, view.series),
    )


@router.get("/usage.csv", name="ui.usage.csv")
def usage_csv(
    request: Request, runtime: RuntimeDep, s: web.SessionDep, team: Text = None
) -> Response:
    _, principal = s
    report = runtime.usage.costs(principal, runtime.dashboard.usage_query(_blank(team)))
    return Response(
        summary_csv(report),
        media_type="text/csv; charset=utf-8",
        headers={**web.HEADERS, "Content-Disposition": 'attachment; filename="costs.csv"'},
    )


@router.get("/audit", name="ui.audit")
def audit(
    request: Request,
    runtime: RuntimeDep,
    s: web.SessionDep,
    team: Text = None,
    actor: Text = None,
    action: Text = None,
    outcome: Text = None,
    cursor: Text = None,
) -> HTMLResponse:
    session, principal = s
    where = AuditFilter(_blank(team), _blank(actor), _blank(action), _blank(outcome))
    page = runtime.audit.list(principal, where, PAGE, _blank(cursor))
    return web.render(
        request,
        "audit.html",
        session=session,
        principal=principal,
        page=page,
        where=where,
        paged=cursor is not None,
    )
