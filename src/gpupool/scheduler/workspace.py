"""The cycle's mutable working copy of a snapshot: room, usage and cohort balances.

The snapshot is immutable; :class:`Workspace` copies what decisions change and :meth:`apply`
records each admission at once, so the next decision of the same cycle sees it.

Invariants:

* ``usage[team][gpu_type]`` is the sum of GPUs the team holds: its running jobs (from
  ``RunningJob.gpus``) plus this cycle's admissions. Node room comes from ``NodeView.used_*`` only
  (see :class:`~gpupool.scheduler.snapshot.NodeView`).
* ``cohorts[(cohort, gpu_type)]`` equals the sum of every member's ``lendable`` and ``borrowed``
  at its current usage (see :mod:`gpupool.core.quota`); :meth:`apply` keeps it so.
* ``gpuless_used(team, gpu_type)`` is the ``(CPUs, GB)`` the team's GPU-less jobs on the type
  count against its cap (:func:`~gpupool.core.quota.gpuless_charge`): its running ones plus
  this cycle's GPU-less admissions and GPU-less preemptors' claims. Built at the first
  GPU-less decision of the cycle (most cycles have none, and then no pass over the running jobs
  is made). Unlike GPU usage it is never lowered ahead of time: a claim does not take its
  victims' charge off (they hold their CPUs until they end) but adds a GPU-less preemptor's
  own (:meth:`charge_gpuless`), so the cap is never exceeded and no other job of the team takes
  the share of it the preemptor counts on. An admission or a claim moves ``quota_epoch`` of its
  team and type, so answers remembered on it stay exact.
* Quota is kept in the *future* state: once a preemptor claims its victims (:meth:`claim`),
  the victims' GPUs no longer count for their teams and the preemptor's do count for its own,
  although the preemptor is not admitted. Room is kept in the *present* state: victims still
  hold their devices, and the preemptor holds the free room it will need besides theirs. So no
  decision of the cycle hands out room that is not free now, and none hands out quota a
  preemptor counts on (docs/architecture.md §5.6).
* ``claimed`` holds the ids of running jobs some preemptor of this cycle waits for; they are
  never chosen again.
* ``epoch`` counts every change of room or quota (admissions, claims, reservations). Nothing a
  decision reads changes while ``epoch`` does not, so a decision computed at one epoch may be
  reused for an identical job at the same epoch. What-if changes (:class:`Simulation`) are
  undone before anything reads the epoch again.
* Finer epochs say *what* changed, so a remembered decision survives changes it does not read
  (see :meth:`Workspace.type_stamp`): ``room_epoch(f)`` moves whenever room of gpu type ``f``
  changes, ``quota_epoch(team, f)`` whenever the usage of ``team`` or of any member of its
  cohort changes on ``f``, and ``rare_epoch`` on every claim and reservation (they change room,
  usage, the claimed set and the held room at once, and are few per cycle). Every change that
  moves ``epoch`` moves the finer epochs of everything it changed.
* Pools are listed per gpu type in name order; iteration never depends on input order. A
  type's rooms are copied from the snapshot at its first use (:meth:`Workspace.pools_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from types import TracebackType

from gpupool.core.quota import CohortBalance, Quota, gpuless_charge, weighted_share
from gpupool.scheduler.capacity import Held, PoolRoom, Shape
from gpupool.scheduler.snapshot import (
    Placement,
    PoolView,
    QuotaView,
    RunningJob,
    Snapshot,
    TeamView,
    held_gpus,
)

_NO_COHORT = CohortBalance()
_NO_QUOTA = Quota()


@lru_cache(maxsize=4096, typed=True)
def _quota(
    nominal: int,
    borrowing_limit: int | None,
    lending_limit: int | None,
    cpus: float | None,
    memory_gb: float | None,
) -> Quota:
    """One immutable :class:`Quota` per distinct set of numbers: every cycle reads every team's
    quotas, which seldom change."""
    return Quota(nominal, borrowing_limit, lending_limit, cpus, memory_gb)


def _quota_fields(
    view: QuotaView,
) -> tuple[int, int | None, int | None, float | None, float | None]:
    return view.nominal, view.borrowing_limit, view.lending_limit, view.cpus, view.memory_gb


def gpuless_held(running: tuple[RunningJob, ...]) -> dict[tuple[str, str], tuple[float, float]]:
    """``(CPUs, GB)`` per (team, gpu type) that the GPU-less jobs of ``running`` count against
    their teams' caps (terminating jobs included: they hold their room until they end)."""
    held: dict[tuple[str, str], tuple[float, float]] = {}
    for job in running:
        if job.gpus == 0:
            _charge(held, (job.team, job.gpu_type), job.cpus, job.memory_gb, len(job.placements))
    return held


def _charge(
    held: dict[tuple[str, str], tuple[float, float]],
    key: tuple[str, str],
    cpus: float,
    memory_gb: float,
    nodes: int,
) -> None:
    """Add a GPU-less job's charge (:func:`~gpupool.core.quota.gpuless_charge`) to ``key``."""
    more = gpuless_charge(cpus, memory_gb, nodes)
    before = held.get(key, (0.0, 0.0))
    held[key] = (before[0] + more[0], before[1] + more[1])


class Workspace:
    """Everything one cycle reads and changes; see the module invariants."""

    def __init__(self, snapshot: Snapshot, type_weights: Mapping[str, float] | None = None) -> None:
        self.now = snapshot.now
        # What one GPU of each type counts in the fair share (``Policy.gpu_type_weights``).
        self.type_weights = dict(type_weights or {})
        self.running = snapshot.running
        self.teams = dict(snapshot.teams)
        self.budgets = snapshot.budgets  # enforced by the cycle (scheduler.budgets)
        self._quotas: dict[tuple[str, str], Quota] = {}
        # Pool views per gpu type in name order; their rooms are built at first use of the type
        # (a cycle that decides one job on one type never copies the other types' nodes).
        self._pool_views: dict[str, list[PoolView]] = {}
        self._pool_at: dict[str, tuple[str, int]] = {}  # name -> (gpu type, position)
        for view in sorted(snapshot.pools, key=lambda p: p.name):
            same_type = self._pool_views.setdefault(view.gpu_type, [])
            self._pool_at[view.name] = (view.gpu_type, len(same_type))
            same_type.append(view)
        self._pools: dict[str, list[PoolRoom]] = {}
        self.gpu_types = sorted(self._pool_views)
        self.capacity = {
            gpu_type: sum(node.gpus for view in views for node in view.nodes)
            for gpu_type, views in self._pool_views.items()
        }
        # Which pools a team may use never changes within a cycle: remembered per request.
        self._team_pools: dict[tuple[str, str, str | None], tuple[PoolRoom, ...]] = {}
        self._usable: dict[tuple[str, Shape, str, str | None], tuple[PoolRoom, ...]] = {}
        if snapshot.usage is None:  # the one pass over every running job a cycle may make
            self.usage = held_gpus(snapshot.running)
        else:
            self.usage = {team: dict(held) for team, held in snapshot.usage.items()}
        # Running jobs per gpu type, per team (preemption candidates) and the terminating ones:
        # built per type at the first preemption search on it (see ``jobs_of``).
        self._by_type: dict[str, dict[str, list[RunningJob]]] = {}
        self._ending: dict[str, list[RunningJob]] = {}
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
        self.rare_epoch = 0
        self._room_epochs: dict[str, int] = {}
        # Keyed by (cohort, gpu type) for teams in a cohort, else by (team, gpu type).
        self._cohort_epochs: dict[tuple[str, str], int] = {}
        self._team_epochs: dict[tuple[str, str], int] = {}
        self._shares: dict[str, float] = {}  # dropped for a team whenever its usage changes
        # Moves whenever the team's usage changes (what-ifs included): caches keyed on a team's
        # own usage compare it to know they are current.
        self.usage_versions: dict[str, int] = {}
        self.claimed: set[str] = set()
        self._gpuless: dict[tuple[str, str], tuple[float, float]] | None = None
        self._members: dict[str, list[str]] = {}
        # This cycle's admissions as (pool, placements, cpus, memory_gb, ends_by), for reservations.
        self.admitted: list[tuple[str, tuple[Placement, ...], float, float, float | None]] = []

    def jobs_of(self, gpu_type: str) -> dict[str, list[RunningJob]]:
        """Running jobs of ``gpu_type`` that are not terminating, per team (the preemption
        candidates). Built at the first search on the type: most cycles search none, and a
        search reads one type, so no cycle indexes every running job."""
        self._index_type(gpu_type)
        return self._by_type[gpu_type]

    def ending_of(self, gpu_type: str) -> list[RunningJob]:
        """Terminating running jobs of ``gpu_type`` (signalled, still holding their room)."""
        self._index_type(gpu_type)
        return self._ending[gpu_type]

    def _index_type(self, gpu_type: str) -> None:
        if gpu_type in self._by_type:
            return
        by_team: dict[str, list[RunningJob]] = {}
        ending: list[RunningJob] = []
        for job in [j for j in self.running if j.gpu_type == gpu_type]:
            if job.terminating:
                ending.append(job)
            else:
                by_team.setdefault(job.team, []).append(job)
        self._by_type[gpu_type] = by_team
        self._ending[gpu_type] = ending

    def team(self, name: str) -> TeamView:
        """The team's view; a team missing from the snapshot has no quota and no cohort."""
        view = self.teams.get(name)
        if view is None:
            view = self.teams[name] = TeamView(name)
        return view

    def pools_of(self, gpu_type: str) -> list[PoolRoom]:
        """The pools of ``gpu_type`` in name order (empty when the type has none)."""
        pools = self._pools.get(gpu_type)
        if pools is None:
            views = self._pool_views.get(gpu_type, [])
            pools = self._pools[gpu_type] = [PoolRoom(view) for view in views]
        return pools

    def pool_named(self, name: str) -> PoolRoom | None:
        at = self._pool_at.get(name)
        return None if at is None else self.pools_of(at[0])[at[1]]

    def has_pools(self, gpu_type: str) -> bool:
        return gpu_type in self._pool_views

    def team_pools(
        self, team: str, gpu_type: str, backend: str | None = None
    ) -> tuple[PoolRoom, ...]:
        """The pools of ``gpu_type`` the team may use (not dedicated to another team), of
        ``backend`` only when a job is pinned to one."""
        key = (team, gpu_type, backend)
        pools = self._team_pools.get(key)
        if pools is None:
            pools = self._team_pools[key] = tuple(
                pool
                for pool in self.pools_of(gpu_type)
                if pool.usable_by(team) and (backend is None or pool.view.backend == backend)
            )
        return pools

    def usable_pools(
        self, team: str, shape: Shape, gpu_type: str, backend: str | None = None
    ) -> tuple[PoolRoom, ...]:
        """The pools of :meth:`team_pools` that, empty, could hold ``shape`` (a multi-node
        shape only on pools whose backend runs gangs)."""
        key = (team, shape, gpu_type, backend)
        pools = self._usable.get(key)
        if pools is None:
            pools = self._usable[key] = tuple(
                pool
                for pool in self.team_pools(team, gpu_type, backend)
                if pool.could_ever_hold(shape)
            )
        return pools

    def quota(self, team: str, gpu_type: str) -> Quota:
        quota = self._quotas.get((team, gpu_type))
        if quota is None:
            view = self.team(team).quota.get(gpu_type)
            quota = _NO_QUOTA if view is None else _quota(*_quota_fields(view))
            self._quotas[(team, gpu_type)] = quota
        return quota

    def used(self, team: str, gpu_type: str) -> int:
        return self.usage.get(team, {}).get(gpu_type, 0)

    def gpuless_used(self, team: str, gpu_type: str) -> tuple[float, float]:
        """``(CPUs, GB)`` the team's GPU-less jobs on ``gpu_type`` count against its cap."""
        return self._gpuless_held().get((team, gpu_type), (0.0, 0.0))

    def _gpuless_held(self) -> dict[tuple[str, str], tuple[float, float]]:
        held = self._gpuless
        if held is None:
            held = self._gpuless = gpuless_held(self.running)
        return held

    def cohort_balance(self, team: str, gpu_type: str) -> CohortBalance | None:
        """The team's cohort balance for ``gpu_type``; ``None`` when it has no cohort."""
        cohort = self.team(team).cohort
        if cohort is None:
            return None
        return self.cohorts.get((cohort, gpu_type), _NO_COHORT)

    def borrowing(self, team: str, gpu_type: str) -> bool:
        """True when the team uses more of ``gpu_type`` than its nominal quota."""
        return self.used(team, gpu_type) > self.quota(team, gpu_type).nominal

    def cohort_members(self, cohort: str) -> list[str]:
        """The teams of ``cohort``, by name."""
        members = self._members.get(cohort)
        if members is None:
            members = self._members[cohort] = sorted(
                name for name, view in self.teams.items() if view.cohort == cohort
            )
        return members

    def room_epoch(self, gpu_type: str) -> int:
        return self._room_epochs.get(gpu_type, 0)

    def quota_epoch(self, team: str, gpu_type: str) -> int:
        """Moves whenever anything :func:`~gpupool.core.quota.check_quota` or a preemption
        search reads about ``team``'s quota of ``gpu_type`` may have changed: the usage of the
        team or, in a cohort, of any member (the balance, and who borrows)."""
        cohort = self.team(team).cohort
        if cohort is None:
            return self._team_epochs.get((team, gpu_type), 0)
        return self._cohort_epochs.get((cohort, gpu_type), 0)

    def type_stamp(self, team: str, gpu_type: str) -> tuple[int, int, int]:
        """Equal stamps mean that nothing a decision for ``team`` on ``gpu_type`` reads (room of
        the type, the team's and its cohort's usage of it, claims, reservations) has changed."""
        return (
            self.rare_epoch,
            self._room_epochs.get(gpu_type, 0),
            self.quota_epoch(team, gpu_type),
        )

    def _moved(self, team: str, gpu_type: str) -> None:
        """Room of ``gpu_type`` and ``team``'s usage of it changed: move the epochs that say so."""
        self.epoch += 1
        self._room_epochs[gpu_type] = self._room_epochs.get(gpu_type, 0) + 1
        cohort = self.team(team).cohort
        epochs, key = (
            (self._team_epochs, (team, gpu_type))
            if cohort is None
            else (self._cohort_epochs, (cohort, gpu_type))
        )
        epochs[key] = epochs.get(key, 0) + 1

    def moved_everything(self) -> None:
        """A claim or a reservation: invalidates every remembered decision (they are rare)."""
        self.epoch += 1
        self.rare_epoch += 1

    def within_nominal(self, team: str, gpu_type: str, need: int) -> bool:
        return need == 0 or self.used(team, gpu_type) + need <= self.quota(team, gpu_type).nominal

    def share(self, team: str) -> float:
        """The team's weighted dominant share now (formula in :mod:`gpupool.core.quota`)."""
        share = self._shares.get(team)
        if share is None:
            used = self.usage.get(team, {})
            borrowed = {f: self.quota(team, f).borrowed(n) for f, n in used.items()}
            share = self._shares[team] = weighted_share(
                borrowed, self.capacity, self.team(team).weight, self.type_weights
            )
        return share

    def change_usage(self, team: str, gpu_type: str, delta: int) -> None:
        """Add ``delta`` GPUs to the team's usage and move its cohort balance to match."""
        if not delta:
            return
        before = self.used(team, gpu_type)
        self.usage.setdefault(team, {})[gpu_type] = before + delta
        self._shares.pop(team, None)
        self.usage_versions[team] = self.usage_versions.get(team, 0) + 1
        cohort = self.team(team).cohort
        if cohort is not None:
            key = (cohort, gpu_type)
            balance = self.cohorts.get(key, _NO_COHORT)
            self.cohorts[key] = balance.moved(self.quota(team, gpu_type), before, before + delta)

    def apply(
        self,
        team: str,
        gpu_type: str,
        pool: PoolRoom,
        nodes: tuple[int, ...],
        shape: Shape,
        ends_by: float | None = None,
    ) -> tuple[Placement, ...]:
        """Record an admission: take the room, add the usage, move the cohort balance."""
        placements = pool.take(nodes, shape)
        self.change_usage(team, gpu_type, shape.gpus * shape.nodes)
        if shape.gpus == 0:
            self._add_gpuless(team, gpu_type, shape)
        self.admitted.append((pool.name, placements, shape.cpus, shape.memory_gb, ends_by))
        self._moved(team, gpu_type)
        return placements

    def charge_gpuless(self, team: str, gpu_type: str, shape: Shape) -> None:
        """A GPU-less preemptor of ``team`` claimed its victims: its charge counts against the
        team's cap from now on, so that no later decision gives the team's share of the cap it
        counts on to another of the team's GPU-less jobs (its victims keep theirs until they
        end, so the cap is never exceeded)."""
        self._add_gpuless(team, gpu_type, shape)
        self._moved(team, gpu_type)

    def _add_gpuless(self, team: str, gpu_type: str, shape: Shape) -> None:
        _charge(self._gpuless_held(), (team, gpu_type), shape.cpus, shape.memory_gb, shape.nodes)

    def claim(self, team: str, gpu_type: str, need: int, victims: list[RunningJob]) -> None:
        """A preemptor of ``team`` counts on ``victims`` ending: move the quota to the future.

        Room is not touched here (see the module invariants); the caller holds the free room
        the preemptor needs besides its victims'.
        """
        for victim in victims:
            self.claimed.add(victim.id)
            self.change_usage(victim.team, victim.gpu_type, -victim.gpus)
        self.change_usage(team, gpu_type, need)
        self.moved_everything()


class Simulation:
    """Reversible what-if changes of a workspace (docs/code-style.md §3): remove running jobs or
    release holds, read the workspace, and have everything restored on exit, in reverse order.

    Invariant: on exit room, usage, cohort balances and each touched pool's remembered failures
    are exactly what they were on entry; no epoch ever moves.
    """

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws
        self._removed: dict[str, tuple[RunningJob, list[Held]]] = {}
        self._released: list[Held] = []
        self._failures: dict[str, list[Shape]] = {}

    def __enter__(self) -> Simulation:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for job_id in reversed(list(self._removed)):
            self.put_back(job_id)
        for held in reversed(self._released):
            held.pool.occupy(held)
        self._released.clear()
        for name, failed in self._failures.items():
            pool = self._ws.pool_named(name)
            assert pool is not None  # saved from this very pool
            pool.restore_failures(failed)

    def remove(self, job: RunningJob) -> None:
        """As if ``job`` had ended: its usage and the room on its placements' nodes are free."""
        ws = self._ws
        ws.change_usage(job.team, job.gpu_type, -job.gpus)
        freed: list[Held] = []
        pool = ws.pool_named(job.pool)
        if pool is not None:
            self._save_failures(pool)
            for placement in job.placements:
                index = pool.node_index(placement.node)
                if index is not None:
                    freed.append(pool.release(index, placement.devices, job.cpus, job.memory_gb))
        self._removed[job.id] = (job, freed)

    def removed(self, job_id: str) -> bool:
        return job_id in self._removed

    def put_back(self, job_id: str) -> None:
        """Undo :meth:`remove` of one job."""
        job, freed = self._removed.pop(job_id)
        for held in reversed(freed):
            held.pool.occupy(held)
        self._ws.change_usage(job.team, job.gpu_type, job.gpus)

    def release(self, held: Held) -> None:
        """As if a hold were given up."""
        self._save_failures(held.pool)
        self._released.append(
            held.pool.release(held.index, held.devices, held.cpus, held.memory_gb)
        )

    def _save_failures(self, pool: PoolRoom) -> None:
        if pool.name not in self._failures:
            self._failures[pool.name] = pool.failures()
