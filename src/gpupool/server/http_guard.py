"""Slow clients cannot hold the server's connections: read timeouts for HTTP requests.

uvicorn closes idle keep-alive connections, but a request that has begun and never ends
(a request line with no end of headers, a body that stops: "slowloris") holds its
connection and a file descriptor forever; enough of them exhaust the descriptors and every
new connection, ``/healthz`` included, fails. :func:`guarded_protocol` makes a subclass of
uvicorn's httptools protocol with two deadlines:

* **headers**: the request line and headers must be complete within ``header_timeout_s``
  of the connection being made (for the first request) or of the request's first byte
  (for the next ones on a keep-alive connection). Past it the server answers 408 and closes.
* **body**: the body may pause at most ``body_timeout_s`` between two pieces (an idle
  timeout, so a large upload at a steady pace is fine). Past it the connection is closed and
  the route sees the client's disconnect. A pause the server caused (it stopped reading
  because the route has not taken what came) does not count.

:func:`raise_open_files_limit` lifts the process's soft limit on open files to its hard
limit at start, so the remaining connections have room (the default soft limit is often
1,024).
"""

from __future__ import annotations

import asyncio
import logging
import resource
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)

_TIMEOUT_408 = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: text/plain; charset=utf-8\r\n"
    b"content-length: 29\r\n"
    b"connection: close\r\n\r\n"
    b"request not complete in time\n"
)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header and body read deadlines (see the module)."""

    header_timeout_s = 10.0
    body_timeout_s = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_timer: asyncio.TimerHandle | None = None

    # -- the deadline ---------------------------------------------------------------------

    def _arm(self, seconds: float, late: Any) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(seconds, late)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _headers_late(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # An answer to an earlier request is still being sent (a pipelined request has
            # begun behind it): the new request's clock starts when that answer is done.
            self._arm(self.header_timeout_s, self._headers_late)
            return
        log.info("closing a connection from %s: request headers not complete in time", self.client)
        self.transport.write(_TIMEOUT_408)
        self.transport.close()

    def _body_late(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        if self.flow is not None and self.flow.read_paused:
            self._arm(self.body_timeout_s, self._body_late)  # we are not reading: not their fault
            return
        log.info("closing a connection from %s: request body stalled", self.client)
        self.transport.close()

    # -- uvicorn's callbacks ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout_s, self._headers_late)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._read_timer is None:  # the first request keeps its deadline from the connect
            self._arm(self.header_timeout_s, self._headers_late)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm(self.body_timeout_s, self._body_late)  # on_message_complete disarms it

    def on_body(self, body: bytes) -> None:
        super().on_body(body)
        self._arm(self.body_timeout_s, self._body_late)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()


def guarded_protocol(header_timeout_s: float, body_timeout_s: float) -> type[HttpToolsProtocol]:
    """The protocol class to give uvicorn (``http=``), with these deadlines."""
    return type(
        "GuardedHttpToolsProtocol",
        (GuardedHttpToolsProtocol,),
        {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s},
    )


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft limit on open files to the hard limit; returns ``(soft, hard)`` now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open files limit from %d: %s", soft, exc)
    return soft, hard
