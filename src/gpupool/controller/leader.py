"""Which controller process may decide: one leader, elected through a lease in the store.

Several ``gpupool server --role controller`` (or ``all``) processes may run against one
PostgreSQL store; exactly one of them schedules and dispatches at a time. Each campaigns for
the ``controller_lease`` row (``state.lease``) every ``renew_s``; the holder renews it, the
others take it once it has gone ``lease_s`` without renewal (by the database's clock).

Invariants:

* **Every decision is fenced.** The controller writes admissions, preemptions and dispatch
  reads in transactions that first call :meth:`Leadership.fence`, which checks, in that same
  transaction, that this process still holds the lease under the epoch it was elected with.
  A deposed leader's late writes are refused (:class:`LeaseLost`) and it stops deciding.
* **A leader stops on its own before anyone can take over.** :meth:`LeaseElector.is_leader`
  turns false ``lease_s * SAFETY`` after the last renewal was *sent* (measured on this
  process's monotonic clock, which starts before the database's ``now()`` of the renewal),
  so a leader cut off from the store stops acting before the lease can expire there.
* **A new term starts from the store.** When the epoch changes the controller forgets what
  it kept between cycles and rebuilds it from the store (``Controller._leading``); backends
  are idempotent on the attempt key, so re-dispatching what the old leader had in flight
  finds its run instead of starting a second one.

On SQLite only one server process runs: :class:`SoleLeader` always leads, fences nothing,
and :func:`lock_sqlite_store` refuses a second process with a message saying why.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Protocol

from gpupool.controller.clock import Clock
from gpupool.core.errors import Conflict
from gpupool.state import lease as lease_store
from gpupool.state.db import Session, SessionFactory
from gpupool.state.lease import LeaseLost, LeaseView

__all__ = [
    "Leadership",
    "LeaseElector",
    "LeaseLost",
    "LeaseTiming",
    "SoleLeader",
    "StoreInUse",
    "describe",
    "holder_id",
    "lock_sqlite_store",
]

log = logging.getLogger(__name__)

# Stop acting after this fraction of the lease has passed without a successful renewal.
SAFETY = 0.8


class StoreInUse(Conflict):
    """Another server process already runs on this SQLite store."""


@dataclass(frozen=True)
class LeaseTiming:
    """``renew_s``: how often the leader renews (and standbys try to take over);
    ``lease_s``: how long an unrenewed lease lasts, so the longest a dead leader is waited for."""

    renew_s: float = 1.0
    lease_s: float = 6.0


class Leadership(Protocol):
    def is_leader(self) -> bool: ...

    @property
    def epoch(self) -> int | None: ...

    def fence(self, session: Session) -> None: ...

    def poll(self) -> None: ...

    def deposed(self, reason: str) -> None: ...

    def start(self, on_change: Callable[[], None]) -> None: ...

    def stop(self) -> None: ...

    def status(self) -> dict[str, Any]: ...


def holder_id() -> str:
    """Names this process in the lease: host and pid for people, a nonce for uniqueness (a
    restarted process reusing a pid is a different holder)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class SoleLeader:
    """The only controller there can be (SQLite, or a test's single process): always leads."""

    epoch: int | None = 0

    def is_leader(self) -> bool:
        return True

    def fence(self, session: Session) -> None:
        """Nothing to check: no other controller can run on this store."""

    def poll(self) -> None:
        """Nothing to renew."""

    def deposed(self, reason: str) -> None:
        log.error("a sole controller cannot be deposed: %s", reason)

    def start(self, on_change: Callable[[], None]) -> None:
        """Nothing to elect."""

    def stop(self) -> None:
        """Nothing to release (the store's lock file goes with the process)."""

    def status(self) -> dict[str, Any]:
        return {"election": "none (one process on this store)", "leading": True}


class LeaseElector:
    """Campaigns for the lease on a thread; ``step`` is one campaign (tests drive it)."""

    def __init__(
        self,
        sessions: SessionFactory,
        clock: Clock,
        timing: LeaseTiming = LeaseTiming(),
        holder: str | None = None,
    ) -> None:
        self._sessions = sessions
        self._clock = clock
        self.timing = timing
        self.holder = holder or holder_id()
        self._lock = threading.Lock()
        self._epoch: int | None = None
        self._valid_until = float("-inf")  # monotonic: stop acting after this
        self._seen: LeaseView | None = None  # the lease as last read
        self._failing = False
        self._last_step = float("-inf")
        self._on_change: Callable[[], None] = lambda: None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the controller asks -----------------------------------------------------------

    @property
    def epoch(self) -> int | None:
        with self._lock:
            return self._epoch

    def is_leader(self) -> bool:
        with self._lock:
            return self._epoch is not None and self._clock.monotonic() < self._valid_until

    def fence(self, session: Session) -> None:
        epoch = self.epoch
        if epoch is None or not self.is_leader():
            raise LeaseLost("this controller does not hold the lease (or could not renew it)")
        lease_store.fence(session, self.holder, epoch)

    def poll(self) -> None:
        """Campaign now if renewal is due and no thread does it: a controller stepped by hand
        (tests, tools) without :meth:`start` renews from its ticks."""
        due = self._clock.monotonic() - self._last_step >= self.timing.renew_s
        if self._thread is None and due:
            self.step()

    def deposed(self, reason: str) -> None:
        with self._lock:
            lost, self._epoch = self._epoch, None
        if lost is not None:
            log.warning("controller lease of epoch %d lost, deciding stops: %s", lost, reason)
            self._on_change()

    # -- the campaign -----------------------------------------------------------------------

    def step(self) -> bool:
        """Renew or try to take the lease once; True when this process leads after it."""
        sent = self._last_step = self._clock.monotonic()
        mine = self.epoch
        try:
            with self._sessions.begin() as session:
                won = lease_store.campaign(
                    session, self.holder, -1 if mine is None else mine, self.timing.lease_s
                )
                seen = won if won is not None else lease_store.read(session)
        except Exception as exc:  # the store is unreachable: keep trying; stop acting in time
            if not self._failing:
                log.warning("cannot reach the store to renew the controller lease: %s", exc)
            self._failing = True
            return self.is_leader()
        if self._failing:
            log.info("the store answers again; controller lease campaign resumed")
        self._failing = False
        changed = False
        with self._lock:
            self._seen = seen
            if won is not None:
                self._valid_until = sent + self.timing.lease_s * SAFETY
                changed = self._epoch != won.epoch
                self._epoch = won.epoch
            elif self._epoch is not None:
                changed, self._epoch = True, None
        if changed and won is not None:
            log.info("leading the controllers: %s, epoch %d", self.holder, won.epoch)
        elif changed:
            holder = seen.holder if seen is not None else "?"
            log.warning("controller lease taken by %s: this controller stands by", holder)
        if changed:
            self._on_change()
        return won is not None

    def start(self, on_change: Callable[[], None]) -> None:
        """Campaign now (so a first process leads at once), then every ``renew_s``."""
        self._on_change = on_change
        self.step()
        self._thread = threading.Thread(target=self._run, name="gpupool-lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.timing.renew_s):
            self.step()

    def stop(self) -> None:
        """Stop campaigning and let the lease expire now: a standby takes over at its next
        campaign instead of waiting ``lease_s``."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        epoch = self.epoch
        with self._lock:
            self._epoch = None
        if epoch is None:
            return
        try:
            with self._sessions.begin() as session:
                lease_store.release(session, self.holder, epoch)
        except Exception as exc:  # it expires on its own
            log.warning("could not release the controller lease: %s", exc)

    def status(self) -> dict[str, Any]:
        with self._lock:
            seen, epoch = self._seen, self._epoch
        return {
            "election": "lease",
            "holder": self.holder,
            "leading": self.is_leader(),
            "epoch": epoch,
            "lease": None if seen is None else _lease_dict(seen),
        }


def _lease_dict(view: LeaseView) -> dict[str, Any]:
    return {
        "holder": view.holder or None,
        "epoch": view.epoch,
        "age_s": round(view.age_s, 3),
        "expires_in_s": round(view.expires_in_s, 3),
        "held_for_s": round(view.held_for_s, 3),
        "expired": view.expires_in_s <= 0,
    }


def describe(
    role: str, leadership: Leadership | None, sessions: SessionFactory, postgres: bool
) -> dict[str, Any]:
    """This process's role and what it knows of the leader, for ``/healthz``. A process that
    runs no controller reads the lease row (one short query); a store it cannot read is
    reported, not raised."""
    out: dict[str, Any] = {"role": role, "pid": os.getpid()}
    if leadership is not None:
        out["controller"] = leadership.status()
    if not postgres:
        out["leader"] = {"election": "none (SQLite: one server runs the API and the controller)"}
        return out
    view: LeaseView | None
    try:
        with sessions() as session:
            view = lease_store.read(session)
    except Exception:
        out["leader"] = {"error": "the store cannot be read"}
        return out
    out["leader"] = None if view is None else _lease_dict(view)
    return out


def lock_sqlite_store(path: Path) -> IO[str]:
    """Hold an exclusive lock on ``path`` (next to the SQLite file) for the process's life;
    raise :class:`StoreInUse`, naming the holder's pid, when another process holds it."""
    handle = path.open("a+", encoding="ascii")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        pid = handle.read().strip() or "unknown"
        handle.close()
        raise StoreInUse(
            f"another gpupool server (pid {pid}) runs on this SQLite store ({path} is locked): "
            "on SQLite only one server process may run. Stop it, or move to PostgreSQL "
            "(GPUPOOL_DATABASE_URL) to run API replicas and standby controllers"
        ) from None
    os.chmod(path, 0o600)
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle
