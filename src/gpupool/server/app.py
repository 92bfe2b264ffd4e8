"""The FastAPI application factory."""

from __future__ import annotations

from fastapi import FastAPI

from gpupool import __version__
from gpupool.server import errors
from gpupool.server.audit import AuditMiddleware
from gpupool.server.routes import artifacts, audit, cluster, health, jobs
from gpupool.server.runtime import Runtime


def create_app(runtime: Runtime) -> FastAPI:
    app = FastAPI(
        title="gpupool",
        version=__version__,
        description="Share GPUs between teams: quotas, fair share, preemption, accounting.",
    )
    app.state.runtime = runtime
    errors.install(app)
    app.include_router(health.router)
    app.include_router(jobs.router)
    app.include_router(cluster.router)
    app.include_router(audit.router)
    app.include_router(artifacts.router)
    # Every mutating request is recorded, including those refused before any route runs.
    app.add_middleware(AuditMiddleware)
    return app
