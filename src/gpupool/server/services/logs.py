"""A job's log through the API: one redacted read, or a followed stream.

Invariants:

* **Redacted like the CLI.** Bytes go out a whole line at a time through
  :func:`gpupool.data.redaction.redact_lines`, so a signed URL or token a job printed never
  reaches a reader (a viewer of the team, say), even when it is split over two backend reads.
  A plain read stops at the last line end it has (``X-Next-Offset`` says where to continue:
  offsets are always those of the raw log); a partial last line comes once it ends or the
  attempt is over.
* **Following holds no thread.** :func:`follow` is an async generator: it awaits
  ``anyio.sleep`` between polls, and each poll (a store query when needed, one backend read)
  runs in a worker thread of its own small limiter (:data:`READ_THREADS`) and returns at
  once. So followers cannot take the threads that serve other requests, however many there
  are and however slow a backend is; a client that goes away cancels its generator.
* **Bounded per user.** :class:`FollowerSlots` admits at most N concurrent streams per user
  (``GPUPOOL_LOG_FOLLOWERS_PER_USER``); one more is refused with 429 naming the limit. A slot
  is held by the response for as long as it is being sent and released however it ends.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import anyio
import anyio.to_thread
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from gpupool.backends.base import JobHandle, LogChunk
from gpupool.core.errors import TooManyRequests
from gpupool.core.jobs import TERMINAL
from gpupool.data.redaction import redact_lines
from gpupool.state.models import AttemptRow

T = TypeVar("T")

POLL_S = 0.2
# Concurrent backend reads for all followers together: a slow backend delays followers,
# never the rest of the API (whose handlers share the default pool of 40 threads).
READ_THREADS = 8

# The job's status and its newest attempt with a handle (JobService.log_target).
Target = Callable[[], tuple[str, AttemptRow | None]]
Read = Callable[[JobHandle, int], LogChunk]


def read_once(read: Read, handle: JobHandle | None, offset: int, terminal: bool) -> LogChunk:
    """One read from ``offset``, cut after its last whole line unless the log is complete;
    ``next_offset`` is where the caller continues (raw log offsets)."""
    if handle is None:
        return LogChunk(b"", offset, complete=terminal)
    chunk = read(handle, offset)
    data, used = redact_lines(chunk.data, final=chunk.complete)
    if used < len(chunk.data):
        return LogChunk(data, offset + used, complete=False)
    return LogChunk(data, chunk.next_offset, complete=chunk.complete)


class FollowerSlots:
    """Concurrent log streams per user, at most ``per_user`` each. Thread-safe: routes that
    take a slot run in the threadpool, responses that give it back on the event loop."""

    def __init__(
        self,
        per_user: int,
        what: str = "follows {n} job logs",
        hint: str = "close one, or read without follow=true",
    ) -> None:
        self.per_user = per_user
        self._what, self._hint = what, hint
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()

    def take(self, user: str) -> None:
        with self._lock:
            if self._open[user] >= self.per_user:
                what = self._what.format(n=self._open[user])
                raise TooManyRequests(
                    f"user {user!r} already {what}, the limit "
                    f"(GPUPOOL_LOG_FOLLOWERS_PER_USER={self.per_user}); {self._hint}"
                )
            self._open[user] += 1

    def give_back(self, user: str) -> None:
        with self._lock:
            self._open[user] -= 1
            if self._open[user] <= 0:
                del self._open[user]

    def open(self, user: str) -> int:
        with self._lock:
            return self._open[user]


class FollowResponse(StreamingResponse):
    """A streamed log that gives its follower slot back when it ends, however it ends."""

    def __init__(self, content: AsyncIterator[bytes], release: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/plain; charset=utf-8")
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


class _Threads:
    """The followers' own thread limiter, made on first use inside the event loop."""

    limiter: anyio.CapacityLimiter | None = None

    @classmethod
    def get(cls) -> anyio.CapacityLimiter:
        if cls.limiter is None:
            cls.limiter = anyio.CapacityLimiter(READ_THREADS)
        return cls.limiter


async def _in_thread(call: Callable[..., T], *args: object) -> T:
    return await anyio.to_thread.run_sync(call, *args, limiter=_Threads.get())


async def follow(
    target: Target, read: Read, start: int, poll_s: float = POLL_S
) -> AsyncIterator[bytes]:
    """Stream the newest attempt from ``start``; when it ends and the job goes on, continue
    with the next attempt (after a ``--- attempt N ---`` line). Ends when the job has."""
    offset, streamed, pending = start, None, b""
    while True:
        status, attempt = await _in_thread(target)
        if attempt is None or attempt.handle is None or attempt.number == streamed:
            if status in TERMINAL:
                if pending:
                    yield redact_lines(pending, final=True)[0]
                return
            await anyio.sleep(poll_s)
            continue
        if streamed is not None:
            offset = 0  # the previous attempt ended complete: nothing of it is pending
            yield f"--- attempt {attempt.number} ---\n".encode()
        handle = JobHandle.from_dict(attempt.handle)
        while True:
            chunk = await _in_thread(read, handle, offset)
            offset = chunk.next_offset
            out, used = redact_lines(pending + chunk.data, final=chunk.complete)
            pending = (pending + chunk.data)[used:]
            if out:
                yield out
            if chunk.complete:
                break
            if not chunk.data:
                await anyio.sleep(poll_s)
        streamed = attempt.number
