"""Group commit: small write transactions that arrive together are committed together.

A single submit is one short transaction, and most of its cost is the commit and the
per-transaction work around it (SQLite's single writer, PostgreSQL's log flush). Under
concurrent submits the threads queue for the writer one by one. :class:`GroupCommit` lets
the first thread that finds the writer free take everything queued by then (up to
``max_batch``) and run it in one transaction; the others wait for their outcome.

Invariants:

* every write is run exactly once in a transaction that committed, or its caller gets the
  exception of the transaction that ran it alone: when a grouped transaction fails, each of
  its writes is retried in a transaction of its own, so one bad write (a duplicate
  idempotency key) never fails the others;
* a caller returns only after its own write committed or failed;
* a write callable may be run twice (once grouped, once alone after a failed group): it must
  only add to the session it is given.

The thread that leads a group leaves once its group is committed; whoever queued next leads
the next one, so no caller waits behind more than one group of others' writes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from gpupool.state.db import Session, SessionFactory

Write = Callable[[Session], None]

MAX_BATCH = 64


@dataclass(eq=False)
class _Pending:
    write: Write
    settled: threading.Event = field(default_factory=threading.Event)
    lead: bool = False  # set instead of settled: this caller leads the next group
    error: BaseException | None = None


class GroupCommit:
    def __init__(self, sessions: SessionFactory, max_batch: int = MAX_BATCH) -> None:
        self._sessions = sessions
        self._max_batch = max_batch
        self._lock = threading.Lock()  # guards _queue and _leading
        self._queue: list[_Pending] = []
        self._leading = False

    def run(self, write: Write) -> None:
        """Run ``write`` in a committed transaction, grouped with concurrent ones."""
        mine = _Pending(write)
        with self._lock:
            self._queue.append(mine)
            lead = not self._leading
            self._leading = True
        if not lead:
            mine.settled.wait()
            lead = mine.lead
        if lead:
            self._lead()
        if mine.error is not None:
            raise mine.error

    def _lead(self) -> None:
        with self._lock:
            group, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
        try:
            self._commit(group)
        except BaseException as exc:  # interrupted: no write of the group may pass as done
            for pending in group:
                pending.error = pending.error or exc
            raise
        finally:
            with self._lock:
                if self._queue:
                    following = self._queue[0]
                    following.lead = True
                    following.settled.set()
                else:
                    self._leading = False
            for pending in group:
                pending.settled.set()

    def _commit(self, group: list[_Pending]) -> None:
        try:
            with self._sessions.begin() as session:
                for pending in group:
                    pending.write(session)
            return
        except Exception as exc:
            if len(group) == 1:
                group[0].error = exc
                return
        for pending in group:  # the group failed: each write alone, with its own outcome
            try:
                with self._sessions.begin() as session:
                    pending.write(session)
            except Exception as exc:
                pending.error = exc
