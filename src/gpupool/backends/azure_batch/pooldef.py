"""Batch pool definitions for gpupool pools, and their autoscale formulas. Pure: no SDK,
no I/O; the same bodies are printed by ``gpupool export azure-batch`` and sent by the adapter
when ``create_pool: true``.

A gpupool pool maps to one Batch pool (the body of ``POST /pools``):

* ``vmSize``, ``virtualMachineConfiguration`` (``image``, ``node_agent_sku_id``) and
  ``taskSlotsPerNode`` come from the pool's ``options:``;
* ``autoscale.node_type`` picks the target: dedicated nodes, or low-priority (spot) nodes,
  whose preemption the adapter reports as PREEMPTED ``evicted:``;
* ``autoscale.mode: fixed`` sets that target to ``nodes``; ``mode: autoscale`` enables
  Batch's autoscaling with the formula of :func:`autoscale_formula`, evaluated every
  5 minutes (Batch's minimum).

The formula, in Batch's autoscale language. ``$PendingTasks`` counts active *and* running
tasks, so demand never drops below what runs:

1. demand = ceil(pending tasks / task slots per node), capped at ``max_nodes``;
2. the floor is ``max(min_nodes, warm_nodes)``: a warm floor keeps scarce tiers ready;
3. while any task was pending in the last ``idle_timeout_s``, the pool keeps at least its
   current nodes (no flapping); after that much idle time it falls to the floor, which is 0
   for a pool that scales to zero;
4. ``$NodeDeallocationOption = taskcompletion``: a node picked for removal finishes its
   running tasks first, so scaling down never kills a task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpupool.backends.azure_batch.options import BatchOptions

if TYPE_CHECKING:
    from gpupool.backends.base import AdapterContext

EVALUATION_INTERVAL = "PT5M"  # Batch's minimum
SAMPLE_PERCENT = 50  # below this share of samples in the window, use the latest sample only


@dataclass(frozen=True)
class Scale:
    """What a pool's ``autoscale:`` says to Batch."""

    min_nodes: int
    max_nodes: int
    warm_nodes: int = 0
    idle_timeout_s: int = 600
    slots_per_node: int = 1
    spot: bool = False


def autoscale_formula(scale: Scale) -> str:
    """The autoscale formula of one pool (see the module docstring), one statement a line."""
    target = "$TargetLowPriorityNodes" if scale.spot else "$TargetDedicatedNodes"
    other = "$TargetDedicatedNodes" if scale.spot else "$TargetLowPriorityNodes"
    current = "$CurrentLowPriorityNodes" if scale.spot else "$CurrentDedicatedNodes"
    lines = [
        f"$minNodes = {scale.min_nodes};",
        f"$maxNodes = {scale.max_nodes};",
        f"$warmNodes = {scale.warm_nodes};",
        "$floor = min($maxNodes, max($minNodes, $warmNodes));",
        f"$slotsPerNode = {scale.slots_per_node};",
        f"$idleWindow = TimeInterval_Second * {scale.idle_timeout_s};",
        "$pending = max(0, $PendingTasks.GetSample(1));",
        "$demand = min($maxNodes, ceil($pending / $slotsPerNode));",
        f"$recent = $PendingTasks.GetSamplePercent($idleWindow) < {SAMPLE_PERCENT} ? $pending"
        " : max($PendingTasks.GetSample($idleWindow));",
        f"$keep = $recent > 0 ? {current} : 0;",
        f"{target} = max($floor, min($maxNodes, max($demand, $keep)));",
        f"{other} = 0;",
        "$NodeDeallocationOption = taskcompletion;",
    ]
    return "\n".join(lines)


def _base(pool_id: str, options: BatchOptions) -> dict[str, Any]:
    return {
        "id": pool_id,
        "vmSize": options.vm_size,
        "virtualMachineConfiguration": {
            "imageReference": dict(options.image),
            "nodeAgentSKUId": options.node_agent_sku_id,
        },
        "taskSlotsPerNode": options.task_slots_per_node,
        # Fill nodes before using more: scale-down then finds empty nodes.
        "taskSchedulingPolicy": {"nodeFillType": "pack"},
    }


@dataclass(frozen=True)
class PoolShape:
    """What of a gpupool pool's configuration its Batch pool is made from (the spec's
    ``Pool``, read by ``gpupool export``: backends do not import the spec)."""

    name: str
    nodes: int
    options: Mapping[str, Any]
    spot: bool = False
    autoscale: Scale | None = None  # None: a fixed size of ``nodes``


def pool_definition(shape: PoolShape) -> dict[str, Any]:
    """The Batch pool body for one ``azure-batch`` pool."""
    options = BatchOptions.parse(shape.options)
    body = _base(options.pool_id(shape.name), options)
    if shape.autoscale is not None:
        body.update(
            enableAutoScale=True,
            autoScaleFormula=autoscale_formula(shape.autoscale),
            autoScaleEvaluationInterval=EVALUATION_INTERVAL,
        )
    else:
        body.update(
            enableAutoScale=False,
            targetDedicatedNodes=0 if shape.spot else shape.nodes,
            targetLowPriorityNodes=shape.nodes if shape.spot else 0,
        )
    return body


def fixed_pool(ctx: AdapterContext, options: BatchOptions) -> dict[str, Any]:
    """What the adapter creates with ``create_pool: true``: ``ctx.nodes`` dedicated nodes."""
    body = _base(options.pool_id(ctx.pool), options)
    body.update(enableAutoScale=False, targetDedicatedNodes=ctx.nodes, targetLowPriorityNodes=0)
    return body
