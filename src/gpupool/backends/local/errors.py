"""Translate the local backend's OS errors into backend errors (docs/code-style.md §8).

The local backend's "system" is the file system and the process table. Running out of
something (disk, file descriptors, processes, memory) passes: retry later. Being refused by
permissions means gpupool was set up wrongly (a state directory it cannot write, a server that
is not root but must switch users): fail loudly. Anything else is treated as transient.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

from gpupool.backends.errors import BackendError, BackendMisconfigured, BackendUnavailable

_MISCONFIGURED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


@contextmanager
def map_local_errors(action: str) -> Iterator[None]:
    try:
        yield
    except BackendError:
        raise
    except OSError as exc:
        if exc.errno in _MISCONFIGURED:
            raise BackendMisconfigured(f"local backend cannot {action}: {exc}") from exc
        raise BackendUnavailable(f"local backend cannot {action} now: {exc}") from exc
    except psutil.AccessDenied as exc:
        raise BackendMisconfigured(f"local backend cannot {action}: {exc}") from exc
    except psutil.Error as exc:
        raise BackendUnavailable(f"local backend cannot {action} now: {exc}") from exc
