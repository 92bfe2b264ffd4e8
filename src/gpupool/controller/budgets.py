"""Budgets on the leading controller (C3): how each stands, alerts, what the cycle enforces.

:class:`BudgetWatch` runs from the controller's tick but evaluates at most every
``EVALUATE_EVERY_S`` (one read of the ledger per distinct period window, not one per tick).
A new configuration (a budget set or raised) is evaluated at the next tick. Each evaluation:

1. reads every team's usage in the current period of each of its budgets
   (:func:`budget_states`, also what the API shows);
2. for each threshold reached that has not alerted in this period, in one transaction fenced
   by the lease: records the alert (``state.budgets``: once per budget, period and threshold),
   writes an audit entry and queues one message per webhook target in the outbox. The server's
   delivery worker (``server.webhooks``) sends them; nothing here waits on a network;
3. keeps :attr:`BudgetWatch.blocks`, the used-up budgets whose enforcement (``hold``,
   ``no-borrow``) the cycle applies, and says when they changed so the loop schedules again.

A period ending or a raised limit lifts a block at the next evaluation. A failed evaluation is
logged and leaves the last blocks in force; a store outage propagates to the loop's pause.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime

from gpupool.accounting.budgets import (
    BudgetState,
    amount_text,
    day_text,
    evaluate,
    in_force,
    number_text,
)
from gpupool.auth.audit import AuditEntry, record
from gpupool.controller.clock import Clock
from gpupool.scheduler import BudgetAction, BudgetBlock
from gpupool.spec.models import ClusterConfig
from gpupool.state import budgets as store
from gpupool.state.db import Session, SessionFactory, store_outage

log = logging.getLogger(__name__)

EVALUATE_EVERY_S = 5.0
ACTOR = "gpupool-controller"
EVENT = "budget.threshold"


def budget_states(session: Session, config: ClusterConfig, now: datetime) -> list[BudgetState]:
    """Every budget in force at ``now``, by team then budget order; one ledger read per
    distinct period window."""
    found = in_force(config, now)
    usage: dict[tuple[datetime, datetime], dict[store.UsageKey, int]] = {}
    states = []
    for team, budget, period in found:
        window = (period.start, period.end)
        if window not in usage:
            usage[window] = store.gpu_ms(session, period.start, period.end, now)
        states.append(evaluate(config, team, budget, period, usage[window]))
    return states


def block_of(state: BudgetState) -> BudgetBlock:
    """What the cycle needs of a used-up budget, with the words ``why`` shows."""
    return BudgetBlock(
        team=state.team,
        budget=state.name,
        action=BudgetAction(state.budget.enforcement),
        gpu_type=state.budget.gpu_type,
        used=number_text(state.used, state.unit),
        limit=amount_text(state.limit, state.unit),
        period=state.period.label,
        until=day_text(state.period.next_day),
    )


def alert_body(state: BudgetState, threshold: float, at: datetime) -> str:
    """The JSON a webhook receives (documented in README.md, Budgets); compact, keys sorted,
    so that the signed bytes are the stored ones."""
    message = (
        f"team {state.team} reached {threshold:g}% of budget {state.name}: used "
        f"{amount_text(state.used, state.unit)} of {amount_text(state.limit, state.unit)} "
        f"in {state.period.label}"
    )
    body = {
        "event": EVENT,
        "at": at.isoformat(),
        "team": state.team,
        "budget": state.name,
        "gpu_type": state.budget.gpu_type,
        "threshold": threshold,
        "used": round(state.used, 6),
        "limit": state.limit,
        "unit": state.unit,
        "percent": round(state.percent, 3),
        "period": {
            "label": state.period.label,
            "start": state.period.start.isoformat(),
            "end": state.period.end.isoformat(),
        },
        "enforcement": state.budget.enforcement,
        "enforced": state.over and state.budget.enforcement != "alert",
        "message": message,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


class BudgetWatch:
    def __init__(
        self,
        sessions: SessionFactory,
        clock: Clock,
        fence: Callable[[Session], None] = lambda _session: None,
        every_s: float = EVALUATE_EVERY_S,
    ) -> None:
        self._sessions = sessions
        self._clock = clock
        self._fence = fence
        self._every = every_s
        self._at = float("-inf")
        self._config: ClusterConfig | None = None  # evaluated with; a new one is read at once
        self.blocks: tuple[BudgetBlock, ...] = ()
        self.states: list[BudgetState] = []

    def forget(self) -> None:
        """A new term: evaluate at the next refresh."""
        self._at = float("-inf")

    def refresh(self, config: ClusterConfig) -> bool:
        """Evaluate when due, or at once for a new configuration (a raised limit applies at
        the next tick); True when the blocks the cycle enforces changed."""
        stamp = self._clock.monotonic()
        if stamp - self._at < self._every and config is self._config:
            return False
        self._at, self._config = stamp, config
        try:
            return self._evaluate(config)
        except Exception as exc:
            if store_outage(exc) is not None:
                raise
            log.exception("budget evaluation failed; the last budget states stay in force")
            return False

    def _evaluate(self, config: ClusterConfig) -> bool:
        now = self._clock.now()
        if not any(team.budgets for team in config.teams.values()):
            states: list[BudgetState] = []
        else:
            with self._sessions() as session:
                states = budget_states(session, config, now)
            self._alert(config, states, now)
        self.states = states
        blocks = tuple(block_of(s) for s in states if s.enforced)
        changed = blocks != self.blocks
        if changed:
            log.info(
                "budgets enforced: %s",
                ", ".join(f"{b.team}/{b.budget} ({b.action.value})" for b in blocks) or "none",
            )
        self.blocks = blocks
        return changed

    def _alert(self, config: ClusterConfig, states: list[BudgetState], now: datetime) -> None:
        """Record each newly reached threshold, its audit entry and webhook messages."""
        reached = [s for s in states if s.reached]
        if not reached:
            return
        with self._sessions.begin() as session:
            new: list[tuple[BudgetState, float]] = []
            for state in reached:
                done = store.alerted(session, state.team, state.name, state.period.start)
                new.extend((state, t) for t in state.reached if t not in done)
            if not new:
                return
            self._fence(session)  # a deposed leader alerts nothing
            for state, threshold in new:
                store.record_alert(
                    session,
                    store.Alert(
                        state.team,
                        state.name,
                        state.period.start,
                        threshold,
                        state.used,
                        state.limit,
                        state.unit,
                    ),
                    now,
                )
                target = (
                    f"{state.team}/{state.name}: {threshold:g}% reached, "
                    f"{amount_text(state.used, state.unit)} of "
                    f"{amount_text(state.limit, state.unit)} in {state.period.label}"
                )
                record(
                    session, AuditEntry(now, ACTOR, "budget.alert", "ok", None, target, state.team)
                )
                body = alert_body(state, threshold, now)
                for hook in config.accounting.webhooks:
                    store.enqueue(session, hook.name, EVENT, body, now)
        log.info("budget alerts: %s", ", ".join(f"{s.team}/{s.name} {t:g}%" for s, t in new))
