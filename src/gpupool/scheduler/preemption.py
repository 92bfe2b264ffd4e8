"""Preemption: which running jobs a pending job may stop so that it fits (docs/architecture.md
§5.5-5.6, Q3).

:meth:`Preemptor.resolve` runs only for a job that fits outright on none of its gpu types, and
tries, first success wins:

1. **Wait.** For each gpu type in order: would the job fit once some unclaimed terminating jobs
   end? Then it claims the smallest such set and preempts nothing new. So a preemptor whose
   victims are still ending never picks more of them (no preemption storm).
2. **Preempt.** For each gpu type in order, two attempts (the policy is that of the team's
   cohort, :func:`policy_for`):

   a. *within nominal* (only if the job alone fits in its team's nominal): it must fit within
      nominal once the victims end. Candidates: lower-priority jobs of its own team
      (``within_team``) and jobs of other cohort teams above their nominal (``reclaim``: any
      priority, or lower priority only);
   b. *borrowing*: it may borrow. Candidates: lower-priority jobs of its own team and, with
      ``borrow_within_cohort``, lower-priority jobs (at most the threshold) of other cohort teams
      above their nominal.

   Unclaimed terminating jobs of the type are counted first in both (they cost nothing). A set
   with more new victims than the cycle's budget has left is not taken, except a reclaim
   within nominal (every victim of another team) that is the cycle's first preemption: a job
   whose guarantee needs more victims than the whole budget (a gang of whole nodes, say) would
   otherwise never get it.

   *Protected* jobs are no candidates (no thrashing, Q10): a job that has run less than its
   priority's ``Policy.min_runtime_s``, or that was preempted ``max_preemptions_per_job``
   times already. A reclaim of a guarantee (attempt a's jobs of other teams above their
   nominal) overrides both: the guarantee is kept within a grace period.
3. **Explain.** Otherwise each gpu type where every policy rule allowed would make it fit gets a
   PREEMPTION reason naming the jobs and the rule (or the budget) that stops it.

Victim choice (one comparator, as Kueue's ``preemption/common/ordering.go``): terminating jobs
first, then jobs of teams above their nominal of the type ("borrowed"), then lowest priority,
least run time (most recently started: the least work lost), id (:func:`victim_order`).

Node targeting: a job of more than one GPU per node, or of several nodes, needs room on
particular nodes, and candidates taken in that order alone are spread over the whole pool. So
the candidates on the nodes that are cheapest to free go first (:func:`target_nodes`): per node,
the first candidate there that frees enough alone, else the candidates in victim order until the
node has room for one member of the job, each counted only while its team's borrowed capacity
lasts; a node costs (own team's jobs among them?, their highest priority, how many, the
GPU-seconds they have run), least first, so a node freed by one whole-node job beats one freed
by eight small ones; for a job of several nodes, the nodes are also chosen after taking each
gang candidate first (one gang may free every node needed, where a cheaper node chosen first
would use up its team's headroom), and the cheapest plan wins;
the ``nodes`` cheapest nodes of the cheapest pool are the target (among the nodes of the first
``_TARGET_SCAN`` candidates, which bounds the search on a large cluster). A victim spanning
several nodes (a gang) is always preempted whole.

Greedy: remove candidates in that order until the job fits (quota, and ``nodes`` nodes of one
usable pool with room), skipping a job of another team once that team is no longer above
nominal (so a team loses at most what it borrows, and its last victim); if all are removed and
it still does not fit, nothing is preempted. Minimality: in reverse order, all but the last are
put back one at a time and stay back when the job still fits without them.

Invariants: every fit is checked on the workspace in a :class:`Simulation` that is undone before
returning; victims are running on the gpu type tried, never terminating, never claimed by another
preemptor, and within the team always of lower priority than the preemptor.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, islice, takewhile
from operator import itemgetter

from gpupool.core.quota import check_quota
from gpupool.scheduler import reasons
from gpupool.scheduler.assignment import Assignment, FitMode, best_pick, job_shape, usable_pools
from gpupool.scheduler.capacity import PoolRoom, Shape
from gpupool.scheduler.snapshot import (
    BorrowWithinCohort,
    Nomination,
    PendingJob,
    PendingReason,
    Placement,
    Policy,
    PreemptionPolicy,
    Reclaim,
    RunningJob,
    WithinTeam,
)
from gpupool.scheduler.victims import VictimIndex, target_nodes, victim_order
from gpupool.scheduler.workspace import Simulation, Workspace

# Every rule allowed: what the explanation (pass 3) searches with. Lower priority within the team
# is not a policy choice: a job never preempts an equal or higher priority job of its own team.
_PERMISSIVE = PreemptionPolicy(
    WithinTeam.LOWER_PRIORITY, Reclaim.ANY, BorrowWithinCohort.LOWER_PRIORITY, None
)

# (team, victims' priority must be below, and at most -- None means no bound, reclaim of a
# guarantee: protected jobs are candidates too).
_Rule = tuple[str, int | None, int | None, bool]
# A greedy that took this many victims without a fit checks whether any set could make it fit.
_BOUND_AFTER = 32
# Node targeting looks for the cheapest nodes among this many first candidates.
_TARGET_SCAN = 1024
_Key = tuple[int, int, float, str]
# What the rules of :meth:`Preemptor._attempts` depend on of a job: team, priority; then type,
# policy. (Its GPUs only decide whether attempt a is tried, :meth:`Preemptor._may_fit_within`.)
_RulesKey = tuple[str, int, str, PreemptionPolicy]
# The viable rules of attempt a and of attempt b (empty: the attempt is not made).
_Rules = tuple[list[_Rule], list[_Rule]]


def policy_for(policy: Policy, cohort: str | None) -> PreemptionPolicy:
    if cohort is None:
        return policy.default_preemption
    return policy.preemption.get(cohort, policy.default_preemption)


class Preemptor:
    """Step 3's preemption pass for one cycle; see the module docstring."""

    def __init__(self, ws: Workspace, policy: Policy) -> None:
        self._ws = ws
        self._policy = policy
        self._index = VictimIndex(ws)
        self._borrowing: dict[tuple[str, str], tuple[tuple[int, int], tuple[str, ...]]] = {}
        # The rules per job kind, with the cohort's borrowers they were made with.
        self._tried: dict[_RulesKey, tuple[tuple[str, ...], _Rules]] = {}
        # Fixed for the cycle (the victim index is: claims only mark jobs claimed): per type and
        # team the lowest priority among the team's candidates (none: no entry), and per
        # (team, type, priority or None) the GPUs of the team's jobs that are ending or
        # preemptible below that priority (:meth:`_may_fit_within`).
        self._lowest: dict[str, dict[str, int]] = {}
        self._freeable: dict[tuple[str, str, int | None], int] = {}
        # Per type, the lowest priority of its running jobs (None: none), fixed for the cycle.
        self._floor: dict[str, int | None] = {}
        self._skipped = False  # a search of this cycle left out a protected job
        # when the first job a search left out as too young may be preempted
        self.protected_until: float | None = None

    def resolve(
        self, job: PendingJob, types: tuple[str, ...], no_fit: Assignment, budget_left: int | None
    ) -> Assignment:
        """PREEMPT with the victims and the terminating jobs to wait for, or NO_FIT explained."""
        ws, shape = self._ws, job_shape(job)
        if not any(self._index.may_have_candidates(job.team, f) for f in types):
            # Every search would end without a fit, so passes 1-3 reduce to the budget check.
            if self._policy.preemption_budget == 0 or budget_left != 0:
                return no_fit
            budget = self._policy.preemption_budget or 0
            return Assignment(FitMode.NO_FIT, (*no_fit.reasons, reasons.budget_used_up(budget)))
        for f in types:  # 1: wait for what is already ending
            if self._index.ending(f):
                usable = usable_pools(job, shape, f, ws)
                chosen = self._search(job, shape, f, usable, [], within_nominal=False)
                if chosen:
                    return Assignment(FitMode.PREEMPT, gpu_type=f, ending=tuple(chosen))
        if self._policy.preemption_budget == 0:
            return no_fit  # preemption disabled
        if budget_left == 0:
            budget = self._policy.preemption_budget or 0
            return Assignment(FitMode.NO_FIT, (*no_fit.reasons, reasons.budget_used_up(budget)))
        if not any(self._may_preempt(job, f) for f in types):
            # The common answer, found cheaply: every policy's attempts are among the permissive
            # ones (a subset of their rules, each viable when its permissive one is, and attempt
            # a allowed when it is there), so no search of pass 2 or 3 has a candidate and the
            # explanation is the assignment's own (``no_fit`` itself: a NO_FIT is only reasons).
            return no_fit
        pools = {f: usable_pools(job, shape, f, ws) for f in types}
        strict = policy_for(self._policy, ws.team(job.team).cohort)
        over_budget: dict[str, int] = {}
        for f in types:  # 2: preempt
            for within, rules in self._attempts(job, f, strict):
                chosen = self._search(job, shape, f, pools[f], rules, within)
                if chosen is None:
                    continue
                victims = tuple(c for c in chosen if not c.terminating)
                if (
                    budget_left is None
                    or len(victims) <= budget_left
                    or (
                        within
                        and budget_left == self._policy.preemption_budget
                        and all(v.team != job.team for v in victims)
                    )
                ):
                    ending = tuple(c for c in chosen if c.terminating)
                    notes = tuple(self._note(job, f, v, within) for v in victims)
                    return Assignment(
                        FitMode.PREEMPT,
                        gpu_type=f,
                        victims=victims,
                        ending=ending,
                        notes=notes,
                    )
                over_budget.setdefault(f, len(victims))
        explained = self._explain(job, types, pools, no_fit, over_budget, budget_left or 0)
        return Assignment(FitMode.NO_FIT, explained)

    def commit(self, job: PendingJob, plan: Assignment) -> Nomination:
        """Claim a PREEMPT plan: hold the free room the job needs besides its victims', and move
        the quota (and a GPU-less job's charge against its team's cap) to the future state (see
        :mod:`gpupool.scheduler.workspace`). Returns what the next cycles owe the job
        (:mod:`gpupool.scheduler.nominations`)."""
        ws, shape, f = self._ws, job_shape(job), plan.gpu_type
        claimed = [*plan.victims, *plan.ending]
        with Simulation(ws) as sim:
            for victim in claimed:
                sim.remove(victim)
            picks = [pick for pool in usable_pools(job, shape, f, ws) if (pick := pool.pick(shape))]
            assert picks  # the search saw it fit in exactly this state
            pick = best_pick(job.id, picks)
            wanted = [
                (i, tuple(n.free_devices[: shape.gpus]), n.free_cpus, n.free_memory_gb)
                for i in pick.nodes
                for n in (pick.pool.nodes[i],)
            ]
        placements = []
        for index, devices, cpus_then, memory_then in wanted:
            node = pick.pool.nodes[index]
            # What the victims free on this node counts towards the job; hold only the rest.
            cpus = shape.cpus - (cpus_then - node.free_cpus)
            memory = shape.memory_gb - (memory_then - node.free_memory_gb)
            pick.pool.hold(index, devices, cpus, memory)
            placements.append(Placement(node.view.name, devices))
        if shape.gpus == 0:
            ws.charge_gpuless(job.team, f, shape)
        ws.claim(job.team, f, job.total_gpus, claimed)
        victims = tuple(victim.id for victim in claimed)
        return Nomination(job.id, victims, pick.pool.name, tuple(placements))

    # --- the search ---------------------------------------------------------------------------

    def _may_preempt(self, job: PendingJob, f: str) -> bool:
        """Whether the permissive attempts on ``f`` (a superset of every policy's) have a rule.

        Answered first without them when no running job of ``f`` has a priority below the
        job's: then no rule that requires a lower priority is viable, and the reclaim rules
        belong to attempt a, which needs :meth:`_may_fit_within`. So a job of a team over its
        nominal, among jobs of one priority (most of them, in a busy cluster), is answered with
        a few lookups."""
        if f in self._floor:
            floor = self._floor[f]
        else:
            floor = self._floor[f] = min(self._lowest_of(f).values(), default=None)
        if (floor is None or floor >= job.priority) and not self._may_fit_within(
            job, f, _PERMISSIVE
        ):
            return False
        return bool(self._attempts(job, f, _PERMISSIVE))

    def _attempts(
        self, job: PendingJob, f: str, policy: PreemptionPolicy
    ) -> list[tuple[bool, list[_Rule]]]:
        """(within nominal?, candidate rules) for attempts a and b; attempts without rules are
        dropped (pass 1 already tried terminating jobs alone), and attempt a when the job
        cannot fit within nominal (:meth:`_may_fit_within`).

        The rules are remembered per team, priority, type and policy while the cohort's
        borrowers (:meth:`_borrowers`) are the same teams: nothing else they read changes within
        the cycle (the victim lists are fixed). Whether attempt a is tried is decided per job,
        as it reads the job's GPUs."""
        cohort = self._ws.team(job.team).cohort
        borrowers = () if cohort is None else self._borrowers(cohort, f, job.team)
        key = (job.team, job.priority, f, policy)
        known = self._tried.get(key)
        if known is None or known[0] != borrowers:
            others = [t for t in borrowers if t != job.team]
            known = self._tried[key] = (borrowers, self._new_rules(job, f, policy, others))
        within, borrow = known[1]
        attempts: list[tuple[bool, list[_Rule]]] = []
        if within and self._may_fit_within(job, f, policy):
            attempts.append((True, within))
        if borrow:
            attempts.append((False, borrow))
        return attempts

    def _new_rules(
        self, job: PendingJob, f: str, policy: PreemptionPolicy, others: list[str]
    ) -> _Rules:
        """The viable rules (:meth:`_viable`) of attempt a and of attempt b; ``others``: the
        other teams of the cohort above their nominal of ``f``."""
        same: list[_Rule] = []
        if policy.within_team is WithinTeam.LOWER_PRIORITY:
            same.append((job.team, job.priority, None, False))
        reclaim: list[_Rule] = []
        if policy.reclaim is Reclaim.ANY:
            reclaim = [(t, None, None, True) for t in others]
        elif policy.reclaim is Reclaim.LOWER_PRIORITY:
            reclaim = [(t, job.priority, None, True) for t in others]
        borrow: list[_Rule] = []
        if policy.borrow_within_cohort is BorrowWithinCohort.LOWER_PRIORITY:
            cap = policy.borrow_max_priority_threshold
            borrow = [(t, job.priority, cap, False) for t in others]
        return self._viable(f, same + reclaim), self._viable(f, same + borrow)

    def _viable(self, f: str, rules: list[_Rule]) -> list[_Rule]:
        """The rules that can yield a candidate: a team's jobs are ordered lowest priority
        first, so when its first job is not allowed none is. Without this a job that cannot
        preempt anything (all priorities equal, say) would search and explain every cycle."""
        kept = []
        for rule in rules:
            team, below, cap, _ = rule
            lowest = self._lowest_priority(f, team)
            if lowest is None:
                continue
            if (below is None or lowest < below) and (cap is None or lowest <= cap):
                kept.append(rule)
        return kept

    def _lowest_priority(self, f: str, team: str) -> int | None:
        """The lowest priority among the team's candidates on ``f`` (the priority of its first
        in victim order), None: it has none. Taken for every team of the type at once, without
        ordering their jobs (a search orders them only if it runs)."""
        return self._lowest_of(f).get(team)

    def _lowest_of(self, f: str) -> dict[str, int]:
        lowest = self._lowest.get(f)
        if lowest is None:
            lowest = self._lowest[f] = {
                name: min([job.priority for job in jobs])
                for name, jobs in self._ws.jobs_of(f).items()
                if jobs
            }
        return lowest

    def _borrowers(self, cohort: str, f: str, team: str) -> tuple[str, ...]:
        """Members of ``cohort`` (``team``'s) above their nominal of ``f``, by name, remembered
        while no usage in the cohort changed (never read inside a what-if, which is undone)."""
        ws = self._ws
        stamp = (ws.rare_epoch, ws.quota_epoch(team, f))
        known = self._borrowing.get((cohort, f))
        if known is None or known[0] != stamp:
            members = tuple(t for t in ws.cohort_members(cohort) if ws.borrowing(t, f))
            known = self._borrowing[(cohort, f)] = (stamp, members)
        return known[1]

    def _may_fit_within(self, job: PendingJob, f: str, policy: PreemptionPolicy) -> bool:
        """Necessary for attempt a: the team's usage, less all of its own that could end or be
        preempted, leaves room for the job within nominal. Other teams' victims never lower
        the team's own usage, so without this a team at its nominal would search (and fail)
        for every job it queues, every cycle."""
        ws, team = self._ws, job.team
        nominal, need = ws.quota(team, f).nominal, job.total_gpus
        if need > nominal:
            return False
        used = ws.used(team, f)
        if used + need <= nominal:
            return True
        lower = policy.within_team is WithinTeam.LOWER_PRIORITY
        key = (team, f, job.priority if lower else None)
        freeable = self._freeable.get(key)
        if freeable is None:
            freeable = sum(j.gpus for j in self._index.ending(f) if j.team == team)
            if lower:  # the team's jobs below the job's priority (in any order: a sum)
                below = job.priority
                own = self._ws.jobs_of(f).get(team, [])
                freeable += sum([j.gpus for j in own if j.priority < below])
            self._freeable[key] = freeable
        return used - freeable + need <= nominal

    def _candidates(self, f: str, rules: list[_Rule], protect: bool = True) -> Iterator[RunningJob]:
        """Unclaimed terminating jobs, then the rules' jobs merged in the documented order;
        ``protect``: leave out protected jobs (:meth:`protected`) where the rule says so."""
        claimed = self._ws.claimed
        yield from (j for j in self._index.ending(f) if j.id not in claimed)
        streams = [
            self._stream(
                self._index.team_jobs(f, team),
                self._ws.borrowing(team, f),
                below,
                cap,
                protect and not reclaim,
            )
            for team, below, cap, reclaim in rules
        ]
        for _, job in heapq.merge(*streams, key=itemgetter(0)):
            yield job

    def _stream(
        self,
        jobs: Iterable[RunningJob],
        borrowed: bool,
        below: int | None,
        cap: int | None,
        protect: bool,
    ) -> Iterator[tuple[_Key, RunningJob]]:
        # Each team's list is sorted by priority, so the allowed jobs are a prefix of it.
        def allowed(job: RunningJob) -> bool:
            return (below is None or job.priority < below) and (cap is None or job.priority <= cap)

        flag, claimed = (0 if borrowed else 1), self._ws.claimed
        for job in takewhile(allowed, jobs):
            if job.id in claimed:
                continue
            if protect and (why := self.protected(job)):
                self._skipped = True  # the explanation looks for what protection stopped
                if why == reasons.MIN_RUNTIME:
                    self._young_until(job)
                continue
            yield (flag, *victim_order(job)), job

    def protected(self, job: RunningJob) -> str | None:
        """Why ``job`` may be preempted only by a reclaim of a guarantee, or None: it has run
        less than its priority's minimum run time, or was preempted the most times allowed."""
        policy = self._policy
        cap = policy.max_preemptions_per_job
        if cap is not None and job.preemptions >= cap:
            return reasons.PREEMPTION_CAP
        least = policy.min_runtime_s.get(job.priority, 0.0) if policy.min_runtime_s else 0.0
        if least > 0 and self._ws.now < job.started_at + least:
            return reasons.MIN_RUNTIME
        return None

    def _young_until(self, job: RunningJob) -> None:
        until = job.started_at + self._policy.min_runtime_s[job.priority]
        if self.protected_until is None or until < self.protected_until:
            self.protected_until = until

    def _search(
        self,
        job: PendingJob,
        shape: Shape,
        f: str,
        pools: Sequence[PoolRoom],
        rules: list[_Rule],
        within_nominal: bool,
        protect: bool = True,
    ) -> list[RunningJob] | None:
        """The greedy-then-minimal victim set of the module docstring, or None."""
        if not pools:
            return None
        candidates = self._candidates(f, rules, protect)
        if shape.gpus > 1 or shape.nodes > 1:
            ws = self._ws
            headroom = {
                team: ws.used(team, f) - ws.quota(team, f).nominal
                for team, *_ in rules
                if team != job.team
            }
            # Targeting reads the first candidates only, so a search on a large cluster stays
            # bounded; the rest follow in victim order.
            head = list(islice(candidates, _TARGET_SCAN))
            ordered = target_nodes(head, shape, pools, job.team, headroom, ws.now)
            candidates = chain(ordered, candidates)
        first = next(candidates, None)
        if first is None:
            return None  # nothing to remove: the loop below would end without a fit
        ws = self._ws
        with Simulation(ws) as sim:
            fit = _Fit(ws, job, shape, f, pools, within_nominal)
            chosen: list[RunningJob] = []
            for candidate in chain((first,), candidates):
                if (
                    not candidate.terminating
                    and candidate.team != job.team
                    and not ws.borrowing(candidate.team, f)
                ):
                    continue  # its team no longer runs on borrowed quota
                sim.remove(candidate)
                chosen.append(candidate)
                fit.grew(candidate.pool)
                if fit.fits():
                    break
                if len(chosen) == _BOUND_AFTER and self._hopeless(job, shape, f, pools, rules, sim):
                    return None
            else:
                return None
            for i in range(len(chosen) - 2, -1, -1):
                candidate = chosen[i]
                sim.put_back(candidate.id)
                fit.shrank(candidate.pool)
                if fit.fits():
                    del chosen[i]
                else:
                    sim.remove(candidate)
                    fit.grew(candidate.pool)
            return chosen

    def _hopeless(
        self,
        job: PendingJob,
        shape: Shape,
        f: str,
        pools: Sequence[PoolRoom],
        rules: list[_Rule],
        sim: Simulation,
    ) -> bool:
        """True when even removing every remaining candidate could not make the job fit.

        A necessary condition only, and cheap (one pass over the candidates, unordered, no
        simulation): per node, the free devices now plus the remaining candidates' devices on
        it; and the quota with every remaining candidate's GPUs gone. Candidates already
        removed count through the simulated workspace.
        """
        ws = self._ws
        extra: dict[str, dict[str, int]] = {}  # pool -> node -> devices the candidates hold
        freed: dict[str, int] = {}
        for candidate in self._unordered(f, rules):
            if sim.removed(candidate.id):
                continue
            freed[candidate.team] = freed.get(candidate.team, 0) + candidate.gpus
            on_pool = extra.setdefault(candidate.pool, {})
            for p in candidate.placements:
                on_pool[p.node] = on_pool.get(p.node, 0) + len(p.devices)
        if not any(
            pool.count_nodes_with(shape.gpus, extra.get(pool.name, {})) >= shape.nodes
            for pool in pools
        ):
            return True
        for team, gpus in freed.items():
            ws.change_usage(team, f, -gpus)
        try:
            used, quota = ws.used(job.team, f), ws.quota(job.team, f)
            fits = check_quota(quota, used, job.total_gpus, ws.cohort_balance(job.team, f)).fits
        finally:
            for team, gpus in freed.items():
                ws.change_usage(team, f, gpus)
        return not fits

    def _unordered(self, f: str, rules: list[_Rule]) -> Iterator[RunningJob]:
        """The candidates of :meth:`_candidates`, in no particular order (for bounds only)."""
        claimed, ws = self._ws.claimed, self._ws
        yield from (j for j in ws.ending_of(f) if j.id not in claimed)
        for team, below, cap, _ in rules:
            for job in ws.jobs_of(f).get(team, []):
                if (
                    (below is None or job.priority < below)
                    and (cap is None or job.priority <= cap)
                    and job.id not in claimed
                ):
                    yield job

    # --- explanations -------------------------------------------------------------------------

    def _shielded(
        self,
        job: PendingJob,
        f: str,
        pools: Sequence[PoolRoom],
        tried: list[tuple[bool, list[_Rule]]],
    ) -> PendingReason | None:
        """PREEMPTION naming the protected jobs when the policy's own attempts would have made
        the job fit but for protection (only looked for when a search left one out)."""
        if not self._skipped:
            return None
        shape = job_shape(job)
        for within, rules in tried:
            chosen = self._search(job, shape, f, pools, rules, within, protect=False)
            if not chosen:
                continue
            victims = [c for c in chosen if not c.terminating]
            why = [
                "" if within and v.team != job.team else (self.protected(v) or "") for v in victims
            ]
            if any(why):
                return _protected_reason(f, victims, why, self._policy, self._ws.now)
        return None

    def _note(self, job: PendingJob, f: str, victim: RunningJob, within: bool) -> str:
        team, cohort = job.team, self._ws.team(job.team).cohort
        by = f"preempted by {job.id} (priority {job.priority}) of {team}"
        if victim.team == team:
            return f"{by}: a higher-priority job of the same team needs the {f} GPUs"
        if within:
            return (
                f"{by}: {victim.team} runs above its nominal {f} quota, borrowed in cohort "
                f"{cohort}, and {team} reclaims it for use within its own nominal quota"
            )
        return (
            f"{by}: borrowing {f} GPUs within cohort {cohort} may preempt lower-priority "
            "borrowing jobs"
        )

    def _explain(
        self,
        job: PendingJob,
        types: tuple[str, ...],
        pools: dict[str, tuple[PoolRoom, ...]],
        no_fit: Assignment,
        over_budget: dict[str, int],
        budget_left: int,
    ) -> tuple[PendingReason, ...]:
        found: dict[str, PendingReason] = {}
        strict = policy_for(self._policy, self._ws.team(job.team).cohort)
        for f in types:
            if f in over_budget:
                budget = self._policy.preemption_budget or 0
                found[f] = reasons.over_budget(f, over_budget[f], budget, budget_left)
                continue
            tried = self._attempts(job, f, strict)  # these searches failed already
            shielded = self._shielded(job, f, pools[f], tried)
            if shielded is not None:
                found[f] = shielded
                continue
            if strict == _PERMISSIVE:
                continue
            for within, rules in self._attempts(job, f, _PERMISSIVE):
                if (within, rules) in tried:
                    continue
                chosen = self._search(job, job_shape(job), f, pools[f], rules, within)
                if chosen:
                    victims = [c for c in chosen if not c.terminating]
                    why = _forbidding_rule(job, strict, victims, within)
                    found[f] = reasons.not_allowed(f, job.team, victims, why)
                    break
        return tuple(found.get(r.gpu_type, r) for r in no_fit.reasons)


def _protected_reason(
    f: str, victims: Sequence[RunningJob], why: Sequence[str], policy: Policy, now: float
) -> PendingReason:
    """PREEMPTION: the job would fit by preempting ``victims``, but those that are protected
    (``why`` says how, per victim) may not be preempted yet."""
    held = [(v, w) for v, w in zip(victims, why, strict=True) if w]
    runtime = [v for v, w in held if w == reasons.MIN_RUNTIME]
    capped = [v for v, w in held if w == reasons.PREEMPTION_CAP]
    until = min(
        (v.started_at + policy.min_runtime_s.get(v.priority, 0.0) for v in runtime), default=now
    )
    return reasons.protected(f, runtime, until, capped, policy.max_preemptions_per_job)


def _forbidding_rule(
    job: PendingJob, policy: PreemptionPolicy, victims: list[RunningJob], within: bool
) -> str:
    """The first rule of ``policy`` that forbids preempting one of ``victims``, in words."""
    team = job.team
    for victim in victims:
        if victim.team == team:
            if policy.within_team is WithinTeam.NEVER:
                return f"{team}'s policy does not allow preempting within the team"
        elif within:
            if policy.reclaim is Reclaim.NEVER:
                return f"{team}'s policy does not allow reclaiming lent quota"
            if policy.reclaim is Reclaim.LOWER_PRIORITY and victim.priority >= job.priority:
                return f"{team}'s policy does not allow reclaiming from priority ≥ {job.priority}"
        else:
            if policy.borrow_within_cohort is BorrowWithinCohort.NEVER:
                return (
                    f"{team}'s policy does not allow preempting other teams' jobs to borrow "
                    "within the cohort"
                )
            cap = policy.borrow_max_priority_threshold
            if cap is not None and victim.priority > cap:
                return f"{team}'s policy allows preempting borrowing jobs only up to priority {cap}"
    return f"{team}'s preemption policy does not allow it"


class _Fit:
    """Does the job fit the simulated workspace? Quota first (cheap), then the pools with room.

    ``grew``/``shrank`` re-check only the pool whose room changed: room only grows while victims
    are removed and only shrinks while they are put back, so no other pool's answer can change.
    """

    def __init__(
        self,
        ws: Workspace,
        job: PendingJob,
        shape: Shape,
        f: str,
        pools: Sequence[PoolRoom],
        within_nominal: bool,
    ) -> None:
        self._ws, self._team, self._f, self._shape = ws, job.team, f, shape
        self._need, self._within = job.total_gpus, within_nominal
        self._pools = {pool.name: pool for pool in pools}
        self._ok = {pool.name for pool in pools if pool.pick(shape) is not None}

    def grew(self, pool: str) -> None:
        room = self._pools.get(pool)
        if room is not None and pool not in self._ok and room.pick(self._shape) is not None:
            self._ok.add(pool)

    def shrank(self, pool: str) -> None:
        if pool in self._ok and self._pools[pool].pick(self._shape) is None:
            self._ok.discard(pool)

    def fits(self) -> bool:
        return bool(self._ok) and self._quota_fits()

    def _quota_fits(self) -> bool:
        ws, team, f = self._ws, self._team, self._f
        used, quota = ws.used(team, f), ws.quota(team, f)
        if self._within:
            return self._need == 0 or used + self._need <= quota.nominal
        return check_quota(quota, used, self._need, ws.cohort_balance(team, f)).fits
