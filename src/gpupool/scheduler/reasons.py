"""Pending reasons as human sentences with the numbers behind them (DESIGN §5.8).

Each function builds the :class:`PendingReason` for one gpu type and one way of not fitting.
Messages are read by people in ``gpupool why``: they name the team, the gpu type and the numbers
that were compared, so a reader can tell what would have to change for the job to run.
"""

from __future__ import annotations

from gpupool.core.quota import QuotaCheck, QuotaVerdict
from gpupool.scheduler.capacity import Shape
from gpupool.scheduler.snapshot import PendingReason, ReasonCode


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


def capacity(gpu_type: str, shape: Shape, pools: int, max_free: int) -> PendingReason:
    message = (
        f"no {gpu_type} pool has {_plural(shape.nodes, 'node')} with {_per_node(shape)} "
        f"free now ({_plural(pools, 'pool')} checked; most free GPUs on one node: {max_free})"
    )
    return PendingReason(gpu_type, ReasonCode.CAPACITY, message)


def no_gpu_type() -> PendingReason:
    return PendingReason("any", ReasonCode.NO_POOL, "no pool of any gpu type exists")
