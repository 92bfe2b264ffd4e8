"""Budgets in a replay (C3): the configuration's budgets enforced on the virtual clock as the
controller enforces them.

The controller's :class:`~gpupool.controller.budgets.BudgetWatch` reads the ledger, evaluates
each budget in its current period and hands the used-up ones to the cycle as
:class:`~gpupool.scheduler.BudgetBlock`. Here the ledger is the simulation's own attempts:

* an attempt that ended adds the GPU-milliseconds it ran inside the current period of the
  budgets (its part before the period started belongs to an earlier period, as in the ledger);
* a running attempt counts up to now, as the ledger's running accrual does;
* the same pure functions decide (:func:`gpupool.accounting.budgets.evaluate`,
  :func:`gpupool.controller.budgets.block_of`), at most every ``EVALUATE_EVERY_S`` of virtual
  time like the controller's watch, and a blocked budget's period end wakes a cycle, so held
  jobs start when the next period begins.

Virtual time ``t`` is ``origin + t`` seconds: the trace's own start for a trace with wall-clock
submit times, else :data:`DEFAULT_ORIGIN`. A replay without budgets pays nothing here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from gpupool.accounting.budgets import UsageKey, evaluate, in_force
from gpupool.controller.budgets import EVALUATE_EVERY_S, block_of
from gpupool.scheduler import BudgetBlock
from gpupool.spec.models import ClusterConfig

# Where virtual time 0 lies for a trace whose submit times are relative.
DEFAULT_ORIGIN = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Use:
    """GPUs an attempt holds (or held) from ``started`` (virtual seconds)."""

    key: UsageKey  # (team, gpu type, pool, node type), as the ledger keys it
    gpus: int
    started: float


@dataclass(slots=True)
class BudgetRun:
    """What one budget did over a replay: how long it held its team back, and how it stood in
    the last period it was evaluated in."""

    team: str
    name: str
    enforcement: str
    unit: str = ""
    limit: float = 0.0
    used: float = 0.0  # in the last period evaluated
    period: str = ""
    enforced_s: float = 0.0  # virtual seconds the budget blocked its team
    periods_over: int = 0  # periods in which it was used up
    _since: float | None = None
    _over_in: set[str] = field(default_factory=set)


class SimBudgets:
    def __init__(self, config: ClusterConfig, origin: datetime = DEFAULT_ORIGIN) -> None:
        self.config = config
        self.origin = origin
        self.enabled = any(team.budgets for team in config.teams.values())
        self.blocks: tuple[BudgetBlock, ...] = ()
        self.runs: dict[tuple[str, str], BudgetRun] = {}
        self._ended: dict[tuple[float, float], dict[UsageKey, int]] = {}  # window -> GPU-ms
        self._evaluated = -math.inf
        self._lifts = math.inf  # when the earliest block's period ends (virtual seconds)

    def at(self, t: float) -> datetime:
        return self.origin + timedelta(seconds=t)

    def ended(self, use: Use, now: float) -> None:
        """An attempt stopped at ``now``: record its GPU time in the windows in force."""
        if not self.enabled or now <= use.started:
            return
        for _team, _budget, period in in_force(self.config, self.at(now)):
            window = self._window(period.start, period.end)
            counted = now - max(use.started, window[0])
            if counted > 0:
                usage = self._ended.setdefault(window, {})
                usage[use.key] = usage.get(use.key, 0) + round(use.gpus * counted * 1000)

    def evaluate(self, now: float, running: Iterable[Use]) -> bool:
        """Bring :attr:`blocks` up to ``now`` (at most every ``EVALUATE_EVERY_S``, or when a
        block's period has ended); True when they changed."""
        if not self.enabled or (now < self._evaluated + EVALUATE_EVERY_S and now < self._lifts):
            return False
        self._evaluated = now
        found = in_force(self.config, self.at(now))
        live = list(running)
        usage_of: dict[tuple[float, float], dict[UsageKey, int]] = {}
        blocks: list[BudgetBlock] = []
        lifts = math.inf
        for team, budget, period in found:
            window = self._window(period.start, period.end)
            usage = usage_of.get(window)
            if usage is None:
                usage = usage_of[window] = self._usage(window, now, live)
            state = evaluate(self.config, team, budget, period, usage)
            run = self.runs.get((team, budget.name))
            if run is None:
                run = self.runs[(team, budget.name)] = BudgetRun(team, budget.name, "")
            run.enforcement, run.unit, run.limit = budget.enforcement, state.unit, state.limit
            run.used, run.period = state.used, period.label
            if state.over and period.label not in run._over_in:
                run._over_in.add(period.label)
                run.periods_over += 1
            if state.enforced:
                blocks.append(block_of(state))
                lifts = min(lifts, window[1])
                if run._since is None:
                    run._since = now
            elif run._since is not None:
                run.enforced_s += now - run._since
                run._since = None
        self._lifts = lifts
        self._ended = {w: u for w, u in self._ended.items() if w in usage_of}
        changed = tuple(blocks) != self.blocks
        self.blocks = tuple(blocks)
        return changed

    def next_change(self) -> float:
        """When a block lifts by itself (its period ends); inf when nothing is blocked."""
        return self._lifts if self.blocks else math.inf

    def close(self, now: float) -> list[BudgetRun]:
        """Each budget's run, the blocks still in force counted up to ``now``."""
        for run in self.runs.values():
            if run._since is not None:
                run.enforced_s += now - run._since
                run._since = None
        return [self.runs[key] for key in sorted(self.runs)]

    def _window(self, start: datetime, end: datetime) -> tuple[float, float]:
        return ((start - self.origin).total_seconds(), (end - self.origin).total_seconds())

    def _usage(
        self, window: tuple[float, float], now: float, running: list[Use]
    ) -> dict[UsageKey, int]:
        usage = dict(self._ended.get(window, {}))
        for use in running:
            counted = now - max(use.started, window[0])
            if counted > 0:
                usage[use.key] = usage.get(use.key, 0) + round(use.gpus * counted * 1000)
        return usage
