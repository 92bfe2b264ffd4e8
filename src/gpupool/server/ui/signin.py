"""Signing in to the dashboard and out of it: an API token pasted once, or OIDC.

The pasted token is checked like any bearer and then dropped: the session cookie keeps its id
only (``sessions``). Cookies are HttpOnly, SameSite=Strict and Secure over TLS; the short-lived
cookie of the OIDC round trip is SameSite=Lax, since the provider sends the browser back from
another site. Back from the provider, the page that sets the session answers 200 and moves on
with a meta refresh: a Strict cookie is not sent on a redirect chain that began on another
site, so a 303 straight to the dashboard would arrive without it.
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from gpupool.core.errors import Forbidden, GpupoolError, Unauthenticated
from gpupool.core.tokens import PREFIX
from gpupool.server.deps import RuntimeDep
from gpupool.server.runtime import Runtime
from gpupool.server.ui import web
from gpupool.server.ui.oidc_client import OidcWebClient, new_verifier
from gpupool.server.ui.sessions import (
    COOKIE,
    MAX_AGE_S,
    OIDC_COOKIE,
    PRE_AGE_S,
    PRE_COOKIE,
    UiSession,
)
from gpupool.spec.models import ClusterConfig

router = APIRouter(prefix="/ui", include_in_schema=False)
OIDC_PATH = "/ui/oidc"
# Browsers drop cookies past about 4 KB: a token's groups beyond this are cut to those that
# give a role here.
MAX_GROUP_CHARS = 2000


def kept_groups(groups: frozenset[str], config: ClusterConfig) -> tuple[str, ...]:
    """The groups a session keeps: all of the token's, or, when they would not fit in a
    cookie, those the configuration names (teams' groups, platform admin groups). A group
    a later configuration starts to name then counts from the next sign-in."""
    ordered = tuple(sorted(groups))
    if sum(len(g) + 3 for g in ordered) <= MAX_GROUP_CHARS:
        return ordered
    named = set(config.platform_admin_groups)
    for team in config.teams.values():
        named.update(team.groups)
    return tuple(g for g in ordered if g in named)


def _oidc(request: Request, runtime: Runtime) -> OidcWebClient | None:
    if runtime.settings.oidc is None:
        return None
    client: OidcWebClient | None = getattr(request.app.state, "ui_oidc", None)
    if client is None:
        client = request.app.state.ui_oidc = OidcWebClient(runtime.settings.oidc)
    return client


def _login_page(
    request: Request, runtime: Runtime, next_path: str, error: str = "", status: int = 200
) -> HTMLResponse:
    cookie, pre_id = web.codec(request).pre_session()
    page = web.render(
        request,
        "login.html",
        status_code=status,
        next_path=next_path,
        form_csrf=web.codec(request).csrf(pre_id),
        error=error,
        oidc=runtime.settings.oidc is not None,
    )
    page.set_cookie(
        PRE_COOKIE,
        cookie,
        max_age=PRE_AGE_S,
        path="/ui/login",
        httponly=True,
        samesite="strict",
        secure=web.secure(request, runtime),
    )
    return page


def _start_session(
    request: Request, runtime: Runtime, response: Response, session: UiSession
) -> Response:
    response.set_cookie(
        COOKIE,
        web.codec(request).dump(session),
        max_age=MAX_AGE_S,
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=web.secure(request, runtime),
    )
    return response


@router.get("/login", name="ui.login")
def login_form(
    request: Request,
    runtime: RuntimeDep,
    next_: Annotated[str | None, Query(alias="next", max_length=2000)] = None,
) -> Response:
    try:
        web.ui_session(request, runtime)
    except web.SignInRequired:
        return _login_page(request, runtime, web.safe_next(next_))
    return web.redirect(web.safe_next(next_))  # signed in already


@router.post("/login", name="ui.login.token")
async def login(request: Request, runtime: RuntimeDep) -> Response:
    form = await web.form_of(request)
    next_path = web.safe_next(form.get("next"))
    pre_id = web.codec(request).pre_session_id(request.cookies.get(PRE_COOKIE))
    if pre_id is None or not web.codec(request).csrf_ok(pre_id, form.get("csrf")):
        return _login_page(
            request, runtime, next_path, "The sign-in form expired; try again.", status=403
        )
    token = form.get("token", "").strip()
    if not token.startswith(PREFIX + "_"):
        return _login_page(
            request,
            runtime,
            next_path,
            "Paste a gpupool API token (gpt_..., from `gpupool token create`).",
            status=401,
        )
    try:
        principal = await run_in_threadpool(runtime.auth.authenticate, token)
    except Unauthenticated as exc:
        return _login_page(request, runtime, next_path, exc.message, status=401)
    request.state.principal = principal
    session = web.codec(request).new(principal.user, "token", principal.token_id, (), None)
    response = web.redirect(next_path)
    response.delete_cookie(PRE_COOKIE, path="/ui/login")
    return _start_session(request, runtime, response, session)


@router.post("/logout", name="ui.logout")
async def logout(request: Request, session: web.SessionDep) -> Response:
    form = await web.form_of(request)
    web.check_csrf(request, session[0], form)
    web.codec(request).revoked.add(session[0].sid, session[0].expires)
    response = web.redirect("/ui/login")
    response.delete_cookie(COOKIE, path="/ui")
    return response


@router.get("/oidc/start", name="ui.oidc.start")
def oidc_start(
    request: Request,
    runtime: RuntimeDep,
    next_: Annotated[str | None, Query(alias="next", max_length=2000)] = None,
) -> Response:
    client = _oidc(request, runtime)
    if client is None:
        return _login_page(request, runtime, "/ui/", "OIDC is not set up here.", status=404)
    state, verifier = secrets.token_urlsafe(24), new_verifier()
    target = client.authorization_url(str(request.url_for("ui.oidc.callback")), state, verifier)
    response = web.redirect(target)
    response.set_cookie(
        OIDC_COOKIE,
        web.codec(request).oidc_flow(state, verifier, web.safe_next(next_)),
        max_age=PRE_AGE_S,
        path=OIDC_PATH,
        httponly=True,
        samesite="lax",  # sent when the provider sends the browser back (a top-level GET)
        secure=web.secure(request, runtime),
    )
    return response


@router.get("/oidc/callback", name="ui.oidc.callback")
def oidc_callback(
    request: Request,
    runtime: RuntimeDep,
    code: Annotated[str | None, Query(max_length=4000)] = None,
    state: Annotated[str | None, Query(max_length=200)] = None,
    error: Annotated[str | None, Query(max_length=200)] = None,
) -> Response:
    client = _oidc(request, runtime)
    flow = web.codec(request).oidc_flow_of(request.cookies.get(OIDC_COOKIE))
    if client is None or flow is None or not state or state != flow.get("state"):
        return _login_page(
            request, runtime, "/ui/", "The sign-in expired or was not started here; try again.", 403
        )
    if error or not code:
        return _login_page(
            request, runtime, "/ui/", f"The identity provider did not sign you in ({error}).", 401
        )
    try:
        token = client.exchange(
            code, str(flow["verifier"]), str(request.url_for("ui.oidc.callback"))
        )
        identity = runtime.auth.oidc_identity(token)
        principal = runtime.auth.for_session(
            "oidc", identity.user, identity.token_id, identity.groups
        )
    except GpupoolError as exc:
        if isinstance(exc, Forbidden | Unauthenticated):
            return _login_page(request, runtime, "/ui/", exc.message, status=401)
        raise
    request.state.principal = principal
    groups = kept_groups(identity.groups, runtime.current_config())
    session = web.codec(request).new(
        identity.user, "oidc", identity.token_id, groups, identity.expires
    )
    next_path = web.safe_next(str(flow.get("next") or "/ui/"))
    response = web.render(request, "signed_in.html", next_path=next_path)
    response.delete_cookie(OIDC_COOKIE, path=OIDC_PATH)
    return _start_session(request, runtime, response, session)
