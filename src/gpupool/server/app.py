"""The FastAPI application factory."""

from __future__ import annotations

from fastapi import FastAPI

from gpupool import __version__
from gpupool.config import ServerLimits
from gpupool.server import docs, errors, ui
from gpupool.server.audit import AuditMiddleware
from gpupool.server.limits import BodyLimitMiddleware
from gpupool.server.routes import (
    arrays,
    artifacts,
    audit,
    budgets,
    cluster,
    config,
    health,
    jobs,
    signin,
    tokens,
    usage,
)
from gpupool.server.runtime import Runtime
from gpupool.server.services.logs import FollowerSlots


def create_app(runtime: Runtime) -> FastAPI:
    app = FastAPI(
        title="gpupool",
        version=__version__,
        description="Share GPUs between teams: quotas, fair share, preemption, accounting.",
        docs_url=None,  # served by server.docs from packaged files, not a CDN
        redoc_url=None,
    )
    app.state.runtime = runtime
    # The route table can be read without a runtime (None): then the default limits.
    settings = getattr(runtime, "settings", None)
    limits = settings.limits if settings is not None else ServerLimits()
    app.state.log_followers = FollowerSlots(limits.log_followers_per_user)
    errors.install(app)
    docs.install(app)
    ui.install(app, runtime)  # the web dashboard at /ui (after errors: it wraps their handler)
    app.include_router(health.router)
    app.include_router(jobs.router)
    app.include_router(arrays.router)
    app.include_router(cluster.router)
    app.include_router(audit.router)
    app.include_router(config.router)
    app.include_router(artifacts.router)
    app.include_router(budgets.router)
    app.include_router(tokens.router)
    app.include_router(signin.router)
    app.include_router(usage.router)
    # Every mutating request is recorded, including those refused before any route runs
    # (anonymous refusals are counted: see server.audit).
    app.add_middleware(AuditMiddleware, summary_every_s=limits.audit_summary_s)
    # Outermost: a body past its cap is refused before anything reads or parses it.
    app.add_middleware(BodyLimitMiddleware, limits=limits)
    return app
