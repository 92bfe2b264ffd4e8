"""The running cluster configuration of this process, kept current from the store.

Every process (API replica or controller) holds one :class:`LiveConfig`. ``get()`` returns
the configuration in force and, at most every ``check_every_s``, asks the store for the newest
version number (one indexed read). When another process applied a new version, this one loads
it, prepares what the new version needs (team storage trees) and swaps it in; listeners then
rebind what depends on it (backend pools) and wake the controller. No restart is needed.

Invariants:

* ``get()`` never blocks on a refresh: while one thread refreshes, others keep the version
  they had. A refresh that fails (store unreachable, a stored text this release no longer
  accepts) leaves the running version in force and is logged; the next check tries again.
* Versions only move forward: a stored version lower than the one held is ignored.
* Version 0 means nothing is stored yet: the configuration given at construction runs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from gpupool.spec.load import parse_config
from gpupool.spec.models import ClusterConfig
from gpupool.state import config_store
from gpupool.state.db import store_outage

log = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0

# What opens a read session (the runtime's session factory).
OpenSession = Callable[[], AbstractContextManager[Any]]
# (old, new) -> None
Listener = Callable[[ClusterConfig, ClusterConfig], None]


class LiveConfig:
    def __init__(
        self,
        sessions: OpenSession,
        config: ClusterConfig,
        version: int = 0,
        check_every_s: float = CHECK_EVERY_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sessions = sessions
        self._config = config
        self._version = version
        self._every = check_every_s
        self._monotonic = monotonic
        self._checked = float("-inf")
        self._store_away = False  # the last check found the store unreachable
        self._lock = threading.Lock()
        self.prepare: list[Listener] = []  # run before the swap; may raise to refuse it
        self.listeners: list[Listener] = []  # run after the swap

    @property
    def version(self) -> int:
        return self._version

    @property
    def config(self) -> ClusterConfig:
        """The configuration held now, without checking the store."""
        return self._config

    def get(self) -> ClusterConfig:
        """The configuration in force, checking the store for a newer one when due."""
        if self._monotonic() - self._checked >= self._every:
            self.refresh(blocking=False)
        return self._config

    def refresh(self, blocking: bool = True) -> bool:
        """Load the newest stored version if it is newer than the one held; True if it was.
        ``blocking=False``: give up at once when another thread is refreshing."""
        if not self._lock.acquire(blocking=blocking):
            return False
        try:
            self._checked = self._monotonic()
            newer = self._load_newer()
            self._store_away = False
            return newer
        except Exception as exc:  # keep serving the version held; say why once per check
            outage = store_outage(exc)  # its message quotes no SQL; said once per outage
            if outage is None:
                log.error("cannot load the newest configuration version: %s", exc)
            elif not self._store_away:
                log.warning("cannot check for a newer configuration: %s", outage.message)
            self._store_away = outage is not None
            return False
        finally:
            self._lock.release()

    def _load_newer(self) -> bool:
        with self._sessions() as session:
            if config_store.current_version(session) <= self._version:
                return False
            row = config_store.current(session)
        if row is None or row.version <= self._version:
            return False
        new = parse_config(row.text, f"configuration version {row.version}")
        old = self._config
        for prepare in self.prepare:
            prepare(old, new)
        self._config, self._version = new, row.version
        log.info("configuration version %d in force (%s)", row.version, row.summary)
        for listener in self.listeners:
            try:
                listener(old, new)
            except Exception:  # one listener's failure must not keep the others from running
                log.exception("a configuration listener failed")
        return True
