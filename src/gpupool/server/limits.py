"""Request body size limits, enforced before a body is parsed or stored.

A pure ASGI middleware, outermost in the app. Two caps (``ServerLimits``):

* JSON requests (every mutating route but artifact uploads): at most ``max_body_bytes``.
  A larger ``Content-Length`` is answered 413 without reading anything; otherwise the body
  is read here, counting, up to the cap (413 past it, which also catches chunked bodies
  without a length) and handed on whole. So no route or validator ever holds more.
* Artifact uploads (``PUT /v1/artifacts/...``, streamed to disk by their route): at most
  ``max_artifact_bytes``, checked on ``Content-Length`` and then while the body streams:
  the chunk that crosses the cap raises :class:`PayloadTooLarge` inside the route (413), so
  the write is abandoned (the artifact service discards its temporary file).

Reads (GET, HEAD, ...) pass through untouched: nothing is buffered for them, and a
streaming response still sees the client's disconnect. The 413 body names the limit and the
variable that sets it.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpupool.config import LIMIT_VARIABLES, ServerLimits
from gpupool.core.errors import PayloadTooLarge
from gpupool.server.errors import error_response

BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
STREAMED_PREFIX = "/v1/artifacts/"


def too_large(limit: int, setting: str, what: str) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"{what} is larger than {limit} bytes, the limit ({LIMIT_VARIABLES[setting]})",
        [{"field": "body", "message": f"at most {limit} bytes"}],
    )


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, limits: ServerLimits) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        streamed = scope["path"].startswith(STREAMED_PREFIX)
        if streamed:
            limit, setting, what = (
                self.limits.max_artifact_bytes,
                "max_artifact_bytes",
                "the artifact",
            )
        else:
            limit, setting, what = self.limits.max_body_bytes, "max_body_bytes", "the body"
        if _declared_length(scope) > limit:
            await _refuse(too_large(limit, setting, what), scope, receive, send)
            return
        if streamed:
            await self.app(scope, _counting(receive, limit, setting, what), send)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: nothing to answer
                return
            body += message.get("body", b"")
            if len(body) > limit:
                await _refuse(too_large(limit, setting, what), scope, receive, send)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replaying(bytes(body), receive), send)


def _declared_length(scope: Scope) -> int:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return 0  # the HTTP parser refuses a malformed length before we get here
    return 0


async def _refuse(error: PayloadTooLarge, scope: Scope, receive: Receive, send: Send) -> None:
    response = error_response(413, error.code, error.message, error.details)
    # The rest of the body is not read: the connection is not reused for another request.
    response.headers["Connection"] = "close"
    await response(scope, receive, send)


def _counting(receive: Receive, limit: int, setting: str, what: str) -> Receive:
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise too_large(limit, setting, what)
        return message

    return counted


def _replaying(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: the client's disconnect

    return replay
