"""What every dashboard route shares: templates, the signed-in principal, CSRF, headers.

Pages are Jinja2 templates rendered on the server with autoescaping on, and every string they
show passes the redaction every other exit of gpupool uses. Every answer carries
a strict Content-Security-Policy (scripts, styles and images from this server only, no
inline script or style, no framing), ``no-store`` and ``no-referrer``, so a page's URL and
contents are neither cached nor sent elsewhere.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qs, urlencode

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from gpupool.auth.principal import Principal
from gpupool.core.errors import Forbidden, Unauthenticated
from gpupool.data.redaction import redact
from gpupool.server.deps import RuntimeDep
from gpupool.server.runtime import Runtime
from gpupool.server.ui.sessions import COOKIE, SessionCodec, UiSession

HERE = Path(__file__).resolve().parent


def _shown(value: object) -> object:
    """Every plain string a page shows passes :func:`redact` (a command, a message or a job
    name may hold a signed URL or a token; the API leaves such fields as they were sent,
    pages do not). Markup the server made itself (the charts) is left as it is."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return redact(value)
    return value


TEMPLATES = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html", "svg"]),
    trim_blocks=True,
    lstrip_blocks=True,
    finalize=_shown,
)
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
}
MAX_FORM_BYTES = 16 * 1024


class SignInRequired(Exception):
    """No valid session: the browser is sent to the sign-in page, then back to ``next``."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


def codec(request: Request) -> SessionCodec:
    found: SessionCodec = request.app.state.ui_sessions
    return found


def safe_next(path: str | None) -> str:
    """Only a path of the dashboard itself (no scheme, host or ``//``): no open redirect."""
    if not path or not path.startswith("/ui") or path.startswith("//") or "\\" in path:
        return "/ui/"
    return path


def secure(request: Request, runtime: Runtime) -> bool:
    return runtime.settings.tls is not None or request.url.scheme == "https"


def ui_session(request: Request, runtime: RuntimeDep) -> tuple[UiSession, Principal]:
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    session = codec(request).load(request.cookies.get(COOKIE))
    if session is None:
        raise SignInRequired(here)
    try:
        principal = runtime.auth.for_session(
            session.kind, session.user, session.token_id, frozenset(session.groups)
        )
    except Unauthenticated:
        raise SignInRequired(here) from None
    request.state.principal = principal  # the audit trail names who made a mutation
    return session, principal


SessionDep = Annotated[tuple[UiSession, Principal], Depends(ui_session)]


async def form_of(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the first value of each); no multipart needed."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        raise Forbidden("the form is too large")
    fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in fields.items()}


def check_csrf(request: Request, session: UiSession, form: dict[str, str]) -> None:
    if not codec(request).csrf_ok(session.sid, form.get("csrf")):
        raise Forbidden("the form's CSRF token is missing or stale; reload the page and retry")


def render(
    request: Request,
    template: str,
    *,
    session: UiSession | None = None,
    principal: Principal | None = None,
    status_code: int = 200,
    **context: Any,
) -> HTMLResponse:
    page = TEMPLATES.get_template(template).render(
        request_path=request.url.path,
        principal=principal,
        csrf=codec(request).csrf(session.sid) if session is not None else "",
        reads_audit=principal is not None
        and (principal.platform_admin or "admin" in principal.roles.values()),
        query=lambda **q: urlencode({k: v for k, v in q.items() if v not in (None, "")}),
        **context,
    )
    return HTMLResponse(page, status_code=status_code, headers=HEADERS)


def redirect(path: str) -> Response:
    return RedirectResponse(path, status_code=303, headers=HEADERS)
