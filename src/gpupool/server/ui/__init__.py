"""The web dashboard, served by the gpupool server itself at ``/ui`` (docs/dashboard.md).

Server-rendered pages (Jinja2) over the same services as the REST API, charts drawn as SVG on
the server, live updates as server-sent events, and one small script and stylesheet from
``ui/static``: no separate process, no build step, nothing fetched from another site.

:func:`install` adds the routes, the static files and two error handlers: a request without a
valid session goes to the sign-in page (and back), and a gpupool error on a dashboard page
is answered as a page with the same status the API would answer (403 for a forbidden cancel,
404 for an unknown job), not as JSON.
"""

from __future__ import annotations

import inspect
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.responses import Response
from fastapi.staticfiles import StaticFiles

from gpupool.core.errors import GpupoolError
from gpupool.data.redaction import redact
from gpupool.server.errors import STATUS_BY_ERROR
from gpupool.server.services.logs import FollowerSlots
from gpupool.server.ui import live, pages, signin, web
from gpupool.server.ui.sessions import SessionCodec

SESSION_PURPOSE = b"dashboard-sessions"


def install(app: FastAPI, runtime: Any) -> None:
    # The status and overview streams of one user, bounded like their log followers.
    app.state.ui_streams = FollowerSlots(
        app.state.log_followers.per_user,
        what="has {n} live dashboard pages open",
        hint="close a dashboard tab",
    )
    signer = getattr(runtime, "signer", None)
    if signer is not None:
        app.state.ui_sessions = SessionCodec(signer.derived_key(SESSION_PURPOSE))
    app.mount("/ui/static", StaticFiles(directory=web.HERE / "static"), name="ui.static")
    app.include_router(signin.router)
    app.include_router(live.router)
    app.include_router(pages.router)

    @app.exception_handler(web.SignInRequired)
    async def _sign_in(request: Request, exc: web.SignInRequired) -> Response:
        if request.method not in ("GET", "HEAD"):
            # A form sent without a session changes nothing: refused (and audited) as such,
            # not redirected as if it had worked.
            return web.render(
                request,
                "error.html",
                status_code=401,
                code=401,
                message="You are not signed in (or your session ended); sign in and retry.",
            )
        return web.redirect("/ui/login?" + urlencode({"next": web.safe_next(exc.next_path)}))

    api_handler = app.exception_handlers[GpupoolError]

    async def _domain(request: Request, exc: Exception) -> Response:
        if not request.url.path.startswith("/ui/") or not isinstance(exc, GpupoolError):
            answer = api_handler(request, exc)
            return await answer if inspect.isawaitable(answer) else answer
        status = STATUS_BY_ERROR.get(type(exc), 500)
        return web.render(
            request,
            "error.html",
            status_code=status,
            code=status,
            message=redact(exc.message),
        )

    app.exception_handlers[GpupoolError] = _domain
