"""Pending reasons as human sentences with the numbers behind them (docs/architecture.md §5.8).

Each function builds the :class:`PendingReason` for one gpu type and one way of not fitting.
Messages are read by people in ``gpupool why``: they name the team, the gpu type and the numbers
that were compared, so a reader can tell what would have to change for the job to run.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.core.quota import MIN_CPUS_CHARGED, GpulessCheck, QuotaCheck, QuotaVerdict
from gpupool.scheduler.capacity import Shape
from gpupool.scheduler.snapshot import (
    BudgetAction,
    BudgetBlock,
    PendingJob,
    PendingReason,
    ReasonCode,
    RunningJob,
)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _per_node(shape: Shape) -> str:
    parts = [_plural(shape.gpus, "GPU")]
    if shape.cpus:
        parts.append(f"{shape.cpus:g} CPUs")
    if shape.memory_gb:
        parts.append(f"{shape.memory_gb:g} GB memory")
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def no_pool(gpu_type: str, team: str, exists: bool) -> PendingReason:
    if exists:
        message = f"every {gpu_type} pool is dedicated to a team other than {team}"
    else:
        message = f"no {gpu_type} pool exists"
    return PendingReason(gpu_type, ReasonCode.NO_POOL, message)


def no_pool_of_backend(gpu_type: str, backend: str) -> PendingReason:
    message = f"the job is pinned to backend {backend}, and no {gpu_type} pool runs on it"
    return PendingReason(gpu_type, ReasonCode.NO_POOL, message)


def no_gang(gpu_type: str, shape: Shape, backends: Sequence[str]) -> PendingReason:
    """TOO_LARGE for a multi-node job where only pools of backends that run no gangs would hold
    it."""
    message = (
        f"no {gpu_type} pool whose backend runs multi-node jobs has "
        f"{_plural(shape.nodes, 'node')} with {_per_node(shape)} each (pools on "
        f"{', '.join(backends)} run single-node jobs only)"
    )
    return PendingReason(gpu_type, ReasonCode.TOO_LARGE, message)


def too_large(gpu_type: str, shape: Shape) -> PendingReason:
    message = (
        f"no {gpu_type} pool has {_plural(shape.nodes, 'node')} with {_per_node(shape)} each, "
        "even when empty"
    )
    return PendingReason(gpu_type, ReasonCode.TOO_LARGE, message)


def quota(gpu_type: str, team: str, cohort: str | None, check: QuotaCheck) -> PendingReason:
    """The QUOTA or COHORT reason for a failed :class:`QuotaCheck`."""
    q = check.quota
    limit = "unlimited" if q.borrowing_limit is None else str(q.borrowing_limit)
    held = (
        f"{team} uses {check.used} {gpu_type} GPUs "
        f"(nominal {q.nominal}, borrowing limit {limit}); the job needs {check.need}"
    )
    if check.verdict is QuotaVerdict.COHORT_SHORT:
        message = (
            f"{held}, {check.borrowed} above nominal, but cohort {cohort} has only "
            f"{_plural(check.idle or 0, f'idle {gpu_type} GPU')} to lend"
        )
        return PendingReason(gpu_type, ReasonCode.COHORT, message)
    if cohort is None:
        message = (
            f"{held}, {check.borrowed} above nominal, and the team has no cohort to borrow from"
        )
    else:
        over = check.used + check.need - (q.ceiling or 0)
        message = f"{held}, {over} more than nominal plus borrowing limit"
    return PendingReason(gpu_type, ReasonCode.QUOTA, message)


def gpuless_cap(gpu_type: str, team: str, check: GpulessCheck) -> PendingReason:
    """QUOTA for a GPU-less job that its team's cap on the type stops (a failed check)."""
    q = check.quota
    if ("cpus" in check.over and q.cpus == 0) or ("memory_gb" in check.over and q.memory_gb == 0):
        what = "CPUs" if "cpus" in check.over and q.cpus == 0 else "GB of memory"
        message = (
            f"{team} may run no GPU-less jobs on {gpu_type}: its {gpu_type} quota gives them "
            f"0 {what} (cpus and memory_gb of the quota bound them)"
        )
        return PendingReason(gpu_type, ReasonCode.QUOTA, message)
    limits = []
    if q.cpus is not None:
        limits.append(f"{q.cpus:g} CPUs")
    if q.memory_gb is not None:
        limits.append(f"{q.memory_gb:g} GB memory")
    used = []
    if "cpus" in check.over:
        used.append(
            f"{check.used[0]:g} of {q.cpus or 0:g} CPUs in use and the job needs "
            f"{check.need[0]:g} (each node of a GPU-less job counts at least "
            f"{MIN_CPUS_CHARGED:g} CPU)"
        )
    if "memory_gb" in check.over:
        used.append(
            f"{check.used[1]:g} of {q.memory_gb or 0:g} GB memory in use and the job needs "
            f"{check.need[1]:g}"
        )
    message = (
        f"{team}'s limit for GPU-less jobs on {gpu_type} ({' and '.join(limits)}, "
        f"from its {gpu_type} quota) is used up: {'; '.join(used)}"
    )
    return PendingReason(gpu_type, ReasonCode.QUOTA, message)


def capacity(gpu_type: str, shape: Shape, pools: int, max_free: int) -> PendingReason:
    message = (
        f"no {gpu_type} pool has {_plural(shape.nodes, 'node')} with {_per_node(shape)} "
        f"free now ({_plural(pools, 'pool')} checked; most free GPUs on one node: {max_free})"
    )
    return PendingReason(gpu_type, ReasonCode.CAPACITY, message)


def no_gpu_type() -> PendingReason:
    return PendingReason("any", ReasonCode.NO_POOL, "no pool of any gpu type exists")


def _jobs_of_teams(jobs: Sequence[RunningJob]) -> str:
    """``2 jobs of team-b (priority 500) and 1 job of team-c (priority 0)``."""
    by_team: dict[str, list[int]] = {}
    for job in jobs:
        by_team.setdefault(job.team, []).append(job.priority)
    parts = []
    for team in sorted(by_team):
        priorities = sorted(set(by_team[team]))
        shown = ", ".join(str(p) for p in priorities)
        word = "priority" if len(priorities) == 1 else "priorities"
        parts.append(f"{_plural(len(by_team[team]), 'job')} of {team} ({word} {shown})")
    return " and ".join(parts)


def preempting(gpu_type: str, victims: int, ending: int) -> PendingReason:
    waiting = victims + ending
    message = f"waiting for {_plural(waiting, 'preempted job')} to end on {gpu_type}"
    if victims and ending:
        message += f" ({victims} preempted in this cycle, {ending} already ending)"
    elif ending:
        message += " (already ending; nothing new preempted)"
    return PendingReason(gpu_type, ReasonCode.PREEMPTING, message)


def not_allowed(gpu_type: str, team: str, victims: Sequence[RunningJob], why: str) -> PendingReason:
    message = f"{gpu_type}: would fit by preempting {_jobs_of_teams(victims)}, but {why}"
    return PendingReason(gpu_type, ReasonCode.PREEMPTION, message)


# Why a running job is protected from preemption other than a reclaim of a guarantee (Q10).
MIN_RUNTIME = "min_runtime"
PREEMPTION_CAP = "preemption_cap"


def protected(
    gpu_type: str,
    young: Sequence[RunningJob],
    until: float,
    capped: Sequence[RunningJob],
    cap: int | None,
) -> PendingReason:
    """PREEMPTION: it would fit by preempting jobs that are protected: ``young`` have not run
    their priority's minimum run time yet (the first is done at ``until``), ``capped`` were
    preempted ``cap`` times already."""
    parts = []
    if young:
        parts.append(
            f"{_jobs_of_teams(young)} have not run their minimum run time yet "
            f"(the first may be preempted from {until:g})"
        )
    if capped:
        parts.append(
            f"{_jobs_of_teams(capped)} were preempted {cap} times already "
            "(scheduler.max_preemptions_per_job)"
        )
    message = (
        f"{gpu_type}: would fit by preempting {_jobs_of_teams([*young, *capped])}, but "
        f"{'; and '.join(parts)}; only a reclaim of a team's nominal quota may preempt them"
    )
    return PendingReason(gpu_type, ReasonCode.PREEMPTION, message)


def over_budget(gpu_type: str, victims: int, budget: int, left: int) -> PendingReason:
    message = (
        f"{gpu_type}: would fit by preempting {_plural(victims, 'job')}, but only {left} of "
        f"this cycle's preemption budget of {budget} are left"
    )
    return PendingReason(gpu_type, ReasonCode.PREEMPTION, message)


def budget_used_up(budget: int) -> PendingReason:
    message = (
        f"preemption not tried: this cycle's budget of {_plural(budget, 'preemption')} is used up"
    )
    return PendingReason("any", ReasonCode.PREEMPTION, message)


def reserved(gpu_type: str, node: str, job_id: str, since: float, due: float) -> PendingReason:
    message = (
        f"{gpu_type} GPUs on node {node} are reserved for job {job_id} (waiting since "
        f"{since:g}) until {due:g}"
    )
    return PendingReason(gpu_type, ReasonCode.RESERVED, message)


def holding(gpu_type: str, nodes: Sequence[str], since: float, due: float) -> PendingReason:
    message = (
        f"waiting since {since:g}, too long: free {gpu_type} GPUs on "
        f"{_plural(len(nodes), 'node')} {', '.join(nodes)} are held for it until {due:g}, "
        "when the jobs running there will have ended"
    )
    return PendingReason(gpu_type, ReasonCode.CAPACITY, message)


def behind_head(head: PendingJob) -> PendingReason:
    """Strict FIFO: the team's head waits, so nothing behind it starts."""
    message = f"waits behind {head.id}, the first job of team {head.team} (strict FIFO queueing)"
    return PendingReason("*", ReasonCode.BLOCKED, message)


def budget(block: BudgetBlock, gpu_type: str | None = None) -> PendingReason:
    """BUDGET: the team's budget is used up. ``gpu_type``: the type a no-borrow budget keeps
    the team within its nominal quota of (hold: the budget's own type, or every type)."""
    of = f" {block.gpu_type}" if block.gpu_type else ""
    used = f"budget {block.budget}: {block.team} used {block.used} of {block.limit}"
    if block.gpu_type:
        used += f" of {block.gpu_type}"
    used += f" in {block.period}"
    after = f"until {block.until} or until an admin raises the budget"
    if block.action is BudgetAction.HOLD:
        message = f"{used}; its new{of} jobs wait {after}"
        return PendingReason(block.gpu_type or "*", ReasonCode.BUDGET, message)
    shown = gpu_type or block.gpu_type or "*"
    message = (
        f"{used}; it runs only within its nominal {shown} quota (no borrowing) {after}"
        if shown != "*"
        else f"{used}; it runs only within its nominal quota (no borrowing) {after}"
    )
    return PendingReason(shown, ReasonCode.BUDGET, message)
