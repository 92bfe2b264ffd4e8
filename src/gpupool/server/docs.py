"""The API's documentation pages (``/docs``: Swagger UI, ``/redoc``: ReDoc), with no CDN.

FastAPI's own pages load their scripts from a public CDN, so on an air-gapped cluster they
stay blank. Here the same files come from the ``fastapi-offline`` package's ``static/``
folder, served by one fixed route each (no path parameter: nothing else can be asked for).
The pages send the token entered under "Authorize" (the ``bearer`` scheme that
``server.deps`` declares) with every "Try it out".
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import FileResponse, HTMLResponse

STATIC = Path(fastapi_offline.__file__).resolve().parent / "static"
FILES = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}
CACHE = {"cache-control": "public, max-age=86400"}


def _file(name: str, media_type: str) -> Callable[[], FileResponse]:
    path = STATIC / name

    async def serve() -> FileResponse:
        return FileResponse(path, media_type=media_type, headers=CACHE)

    return serve


def install(app: FastAPI) -> None:
    """Add ``/docs``, ``/docs/oauth2-redirect``, ``/redoc`` and their files to ``app``
    (made with ``docs_url=None, redoc_url=None``)."""
    for name, media_type in FILES.items():
        app.add_api_route(
            f"/docs/{name}", _file(name, media_type), methods=["GET"], include_in_schema=False
        )

    async def swagger(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} API",
            swagger_js_url=f"{root}/docs/swagger-ui-bundle.js",
            swagger_css_url=f"{root}/docs/swagger-ui.css",
            swagger_favicon_url=f"{root}/docs/favicon.png",
            oauth2_redirect_url=f"{root}/docs/oauth2-redirect",
            swagger_ui_parameters={"persistAuthorization": True},
        )

    async def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} API",
            redoc_js_url=f"{root}/docs/redoc.standalone.js",
            redoc_favicon_url=f"{root}/docs/favicon.png",
            with_google_fonts=False,
        )

    app.add_api_route("/docs", swagger, methods=["GET"], include_in_schema=False)
    app.add_api_route(
        "/docs/oauth2-redirect", oauth2_redirect, methods=["GET"], include_in_schema=False
    )
    app.add_api_route("/redoc", redoc, methods=["GET"], include_in_schema=False)
