"""Budget enforcement in the cycle (C3): ``hold`` admits nothing new, ``no-borrow`` no borrowing.

The controller decides which budgets are used up (``Snapshot.budgets``); the cycle only obeys:

* ``no-borrow``: before the workspace is built (step 1), the team's quota on the budget's gpu
  type (every type when the budget counts all) gets ``borrowing_limit: 0``, so every check of
  the cycle (assignment, preemption to borrow, reservations) sees a team that may hold at most
  its nominal. Running work above nominal goes on, and stays reclaimable as before. A job
  refused by its quota on such a type carries a BUDGET reason after its QUOTA reason.
* ``hold``: a job of the team does not try the budget's gpu type (or any type): those types
  are dropped from what it tries, and if none is left it waits with a BUDGET reason and is not
  decided further. A preemptor nominated before the hold began is still admitted onto the room
  its victims freed (those victims are already stopped).

Invariant: with ``Snapshot.budgets`` empty, nothing here changes a decision.
"""

from __future__ import annotations

from dataclasses import replace

from gpupool.scheduler import reasons
from gpupool.scheduler.snapshot import (
    BudgetAction,
    BudgetBlock,
    PendingJob,
    PendingReason,
    QuotaView,
    ReasonCode,
    Snapshot,
    TeamView,
)


def without_borrowing(snapshot: Snapshot) -> Snapshot:
    """``snapshot`` with ``borrowing_limit: 0`` on the quotas that no-borrow budgets cap."""
    capped = [b for b in snapshot.budgets if b.action is BudgetAction.NO_BORROW]
    if not capped:
        return snapshot
    present = {pool.gpu_type for pool in snapshot.pools}
    teams = dict(snapshot.teams)
    for block in capped:
        team = teams.get(block.team)
        if team is None:
            continue
        types = present | set(team.quota) if block.gpu_type is None else {block.gpu_type}
        quota = dict(team.quota)
        for gpu_type in types:
            quota[gpu_type] = replace(quota.get(gpu_type, QuotaView()), borrowing_limit=0)
        teams[block.team] = TeamView(team.name, team.cohort, team.weight, quota, team.usage_history)
    return replace(snapshot, teams=teams)


class BudgetRules:
    """The blocks of one cycle, per team."""

    def __init__(self, blocks: tuple[BudgetBlock, ...]) -> None:
        self._holds: dict[str, list[BudgetBlock]] = {}
        self._caps: dict[str, list[BudgetBlock]] = {}
        for block in blocks:
            by = self._holds if block.action is BudgetAction.HOLD else self._caps
            by.setdefault(block.team, []).append(block)

    def held(
        self, job: PendingJob, types: tuple[str, ...]
    ) -> tuple[tuple[str, ...], tuple[PendingReason, ...]]:
        """The types ``job`` may still try, and the BUDGET reasons for the ones held."""
        holds = self._holds.get(job.team)
        if not holds:
            return types, ()
        if any(block.gpu_type is None for block in holds):
            whole = next(block for block in holds if block.gpu_type is None)
            return (), (reasons.budget(whole),)
        closed = {block.gpu_type: block for block in holds}
        found = tuple(reasons.budget(closed[t]) for t in types if t in closed)
        return tuple(t for t in types if t not in closed), found

    def explain(
        self,
        job: PendingJob,
        found: tuple[PendingReason, ...],
        held: tuple[PendingReason, ...] = (),
    ) -> tuple[PendingReason, ...]:
        """``held`` then ``found``, with a BUDGET reason after each QUOTA reason of a type a
        no-borrow budget keeps the team within nominal on (a GPU-less job's QUOTA is its CPU
        cap: none). Without budgets ``found`` itself is returned: jobs that wait alike share
        one reasons tuple, which the controller writes once."""
        caps = self._caps.get(job.team)
        if not caps or not job.gpus:
            return (*held, *found) if held else found
        out: list[PendingReason] = list(held)
        for reason in found:
            out.append(reason)
            if reason.code is not ReasonCode.QUOTA:
                continue
            for block in caps:
                if block.gpu_type in (None, reason.gpu_type):
                    out.append(reasons.budget(block, reason.gpu_type))
                    break
        return tuple(out)
