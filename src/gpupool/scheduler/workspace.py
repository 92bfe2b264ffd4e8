"""The cycle's mutable working copy of a snapshot: room, usage and cohort balances.

The snapshot is immutable; :class:`Workspace` copies what decisions change and :meth:`apply`
records each admission at once, so the next decision of the same cycle sees it.

Invariants:

* ``usage[team][gpu_type]`` is the sum of GPUs the team holds: its running jobs (from
  ``RunningJob.gpus``) plus this cycle's admissions. Node room comes from ``NodeView.used_*`` only
  (see :class:`~gpupool.scheduler.snapshot.NodeView`).
* ``cohorts[(cohort, gpu_type)]`` equals the sum of every member's ``lendable`` and ``borrowed``
  at its current usage (see :mod:`gpupool.core.quota`); :meth:`apply` keeps it so.
* ``epoch`` counts admissions applied. Nothing a decision reads changes while ``epoch`` does not,
  so a decision computed at one epoch may be reused for an identical job at the same epoch.
* Pools are listed per gpu type in name order; iteration never depends on input order.
"""

from __future__ import annotations

from gpupool.core.quota import CohortBalance, Quota, dominant_share
from gpupool.scheduler.capacity import PoolRoom, Shape
from gpupool.scheduler.snapshot import Placement, QuotaView, Snapshot, TeamView

_NO_COHORT = CohortBalance()


def _quota_fields(view: QuotaView) -> tuple[int, int | None, int | None]:
    return view.nominal, view.borrowing_limit, view.lending_limit


class Workspace:
    """Everything one cycle reads and changes; see the module invariants."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.teams = dict(snapshot.teams)
        self._quotas: dict[tuple[str, str], Quota] = {}
        self.pools_by_type: dict[str, list[PoolRoom]] = {}
        for pool in sorted(snapshot.pools, key=lambda p: p.name):
            self.pools_by_type.setdefault(pool.gpu_type, []).append(PoolRoom(pool))
        self.capacity = {
            gpu_type: sum(p.total_gpus for p in pools)
            for gpu_type, pools in self.pools_by_type.items()
        }
        self.usage: dict[str, dict[str, int]] = {}
        for job in snapshot.running:
            per_type = self.usage.setdefault(job.team, {})
            per_type[job.gpu_type] = per_type.get(job.gpu_type, 0) + job.gpus
        self.cohorts: dict[tuple[str, str], CohortBalance] = {}
        for name in sorted(self.teams):
            team = self.teams[name]
            if team.cohort is None:
                continue
            used = self.usage.get(name, {})
            for gpu_type in sorted(set(team.quota) | set(used)):
                key = (team.cohort, gpu_type)
                balance = self.cohorts.get(key, _NO_COHORT)
                self.cohorts[key] = balance.with_member(
                    self.quota(name, gpu_type), used.get(gpu_type, 0)
                )
        self.epoch = 0
        self._shares: dict[str, float] = {}  # dropped for a team whenever its usage changes

    def team(self, name: str) -> TeamView:
        """The team's view; a team missing from the snapshot has no quota and no cohort."""
        view = self.teams.get(name)
        if view is None:
            view = self.teams[name] = TeamView(name)
        return view

    def quota(self, team: str, gpu_type: str) -> Quota:
        quota = self._quotas.get((team, gpu_type))
        if quota is None:
            view = self.team(team).quota.get(gpu_type)
            quota = Quota() if view is None else Quota(*_quota_fields(view))
            self._quotas[(team, gpu_type)] = quota
        return quota

    def used(self, team: str, gpu_type: str) -> int:
        return self.usage.get(team, {}).get(gpu_type, 0)

    def cohort_balance(self, team: str, gpu_type: str) -> CohortBalance | None:
        """The team's cohort balance for ``gpu_type``; ``None`` when it has no cohort."""
        cohort = self.team(team).cohort
        if cohort is None:
            return None
        return self.cohorts.get((cohort, gpu_type), _NO_COHORT)

    def within_nominal(self, team: str, gpu_type: str, need: int) -> bool:
        return need == 0 or self.used(team, gpu_type) + need <= self.quota(team, gpu_type).nominal

    def share(self, team: str) -> float:
        """The team's weighted dominant share now (formula in :mod:`gpupool.core.quota`)."""
        share = self._shares.get(team)
        if share is None:
            used = self.usage.get(team, {})
            borrowed = {f: self.quota(team, f).borrowed(n) for f, n in used.items()}
            share = self._shares[team] = dominant_share(
                borrowed, self.capacity, self.team(team).weight
            )
        return share

    def apply(
        self, team: str, gpu_type: str, pool: PoolRoom, nodes: tuple[int, ...], shape: Shape
    ) -> tuple[Placement, ...]:
        """Record an admission: take the room, add the usage, move the cohort balance."""
        placements = pool.take(nodes, shape)
        need = shape.gpus * shape.nodes
        before = self.used(team, gpu_type)
        self.usage.setdefault(team, {})[gpu_type] = before + need
        self._shares.pop(team, None)
        cohort = self.team(team).cohort
        if cohort is not None and need:
            key = (cohort, gpu_type)
            balance = self.cohorts.get(key, _NO_COHORT)
            self.cohorts[key] = balance.moved(self.quota(team, gpu_type), before, before + need)
        self.epoch += 1
        return placements
