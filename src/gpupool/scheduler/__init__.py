"""Pure scheduling decisions (docs/architecture.md §5). Imports only ``gpupool.core``.

The single entry point is :func:`run_cycle`; the controller and the simulator call it.
"""

from gpupool.scheduler.cycle import run_cycle
from gpupool.scheduler.snapshot import (
    Admission,
    BudgetAction,
    BudgetBlock,
    CycleResult,
    NodeView,
    Nomination,
    PendingJob,
    PendingReason,
    Placement,
    Policy,
    PoolView,
    Preemption,
    Queueing,
    QuotaView,
    RunningJob,
    Snapshot,
    TeamView,
    held_gpus,
)

__all__ = [
    "Admission",
    "BudgetAction",
    "BudgetBlock",
    "CycleResult",
    "NodeView",
    "Nomination",
    "PendingJob",
    "PendingReason",
    "Placement",
    "Policy",
    "PoolView",
    "Preemption",
    "Queueing",
    "QuotaView",
    "RunningJob",
    "Snapshot",
    "TeamView",
    "held_gpus",
    "run_cycle",
]
