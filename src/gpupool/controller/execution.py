"""The execution service: the only caller of backend adapters (X1).

Submissions run on a small thread pool so a slow backend never blocks the scheduling loop;
the result (a handle or a classified error) is handed back through a callback that the
controller applies on its next tick. Every call is translated into the backend error
classes, so callers deal with three outcomes only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from gpupool.backends.base import (
    BackendStatus,
    Finder,
    JobHandle,
    JobSpec,
    LogChunk,
    PoolCapacity,
)
from gpupool.backends.errors import BackendError, BackendUnavailable
from gpupool.backends.registry import Registry
from gpupool.controller.probes import ask

log = logging.getLogger(__name__)

SubmitResult = JobHandle | BackendError
T = TypeVar("T")


class ExecutionService:
    def __init__(self, registry: Registry, workers: int = 8) -> None:
        self._registry = registry
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpupool-exec")

    def submit(self, spec: JobSpec, done: Callable[[JobSpec, SubmitResult], None]) -> Future[None]:
        def run() -> None:
            try:
                result: SubmitResult = self._registry.get(spec.pool).submit(spec)
            except BackendError as exc:
                result = exc
            except Exception as exc:  # an adapter bug must not kill the worker silently
                log.exception("backend submit of %s crashed", spec.key)
                result = BackendUnavailable(f"backend error: {type(exc).__name__}")
            done(spec, result)

        return self._pool.submit(run)

    def poll(self, pool: str, handles: Sequence[JobHandle]) -> Mapping[str, BackendStatus]:
        return self._registry.get(pool).poll(handles)

    def poll_async(
        self, pool: str, handles: Sequence[JobHandle]
    ) -> Future[Mapping[str, BackendStatus]]:
        """``poll`` on a worker thread; the future raises ``BackendError`` subclasses only."""
        return self._pool.submit(_classified, self.poll, pool, handles)

    def probe_async(self, pool: str, backend: str) -> Future[PoolCapacity | None]:
        """One cheap question to the pool's backend (``probes.ask``): its capacity, or None
        when it reports none; the future raises ``BackendError`` subclasses only."""

        def read() -> PoolCapacity | None:
            return ask(self._registry.get(pool), pool, backend)

        return self._pool.submit(_classified, read)

    def cancel(self, handle: JobHandle, grace_s: float) -> None:
        self._registry.get(handle.pool).cancel(handle, grace_s)

    def cancel_async(self, handle: JobHandle, grace_s: float) -> Future[None]:
        return self._pool.submit(_classified, self.cancel, handle, grace_s)

    def stop_key(self, pool: str, key: str) -> bool:
        """Stop whatever runs under attempt ``key`` in ``pool`` without a handle for it: found
        by key where the adapter can look runs up (``Finder``). True when one was stopped."""
        backend = self._registry.get(pool)
        if not isinstance(backend, Finder):
            return False
        handle = backend.find(key)
        if handle is None:
            return False
        backend.cancel(handle, 0.0)
        return True

    def stop_key_async(self, pool: str, key: str) -> Future[bool]:
        return self._pool.submit(_classified, self.stop_key, pool, key)

    def logs(self, handle: JobHandle, offset: int) -> LogChunk:
        return self._registry.get(handle.pool).logs(handle, offset)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)
        self._registry.close()


def _classified(call: Callable[..., T], *args: Any) -> T:
    """Run ``call``; an adapter bug becomes ``BackendUnavailable`` (logged) so callers only
    ever deal with the three classified errors."""
    try:
        return call(*args)
    except BackendError:
        raise
    except Exception as exc:
        log.exception("backend call %s crashed", getattr(call, "__name__", call))
        raise BackendUnavailable(f"backend error: {type(exc).__name__}") from exc
