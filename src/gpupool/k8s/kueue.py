"""Kueue objects from the cluster configuration: ResourceFlavors, Cohorts, ClusterQueues,
LocalQueues and WorkloadPriorityClasses (Kueue's ``v1beta2`` API, see ``names.KUEUE_RELEASE``).

The mapping, and what does not carry over, is tabled in docs/kubernetes.md. Invariants:

* a gpu type is a ResourceFlavor of the same name; its node labels and taints come from the
  ``node_labels``/``node_taints`` options of the type's ``kubernetes`` pools (the labels all of
  them share), else the flavor selects nodes labelled ``gpupool.io/gpu-type=<type>``;
* a team is a ClusterQueue of the same name that only its namespace may use, listing every
  flavor, so that a team without quota of a type may still borrow it from its cohort as in
  gpupool; each flavor quotes ``cpu``, ``memory`` and ``nvidia.com/gpu``;
* CPU and memory quotas are the team's share of the type's nodes (its GPUs x the CPUs and memory
  per GPU), or its GPU-less cap when that is larger; borrowing and lending limits scale the same
  way, because a borrowed GPU brings its CPUs and memory along.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.k8s.names import (
    GPU_RESOURCE,
    GPU_TYPE_LABEL,
    KUEUE_API,
    LOCAL_QUEUE,
    MANAGED_BY,
    TEAM_LABEL,
    cpu_quantity,
    memory_quantity,
    weight_quantity,
)
from gpupool.spec.models import ClusterConfig, Preemption

Obj = dict[str, Any]
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
COVERED = ("cpu", "memory", GPU_RESOURCE)  # Kueue wants each flavor's resources in this order

_WITHIN = {"never": "Never", "lower_priority": "LowerPriority"}
_RECLAIM = {"never": "Never", "lower_priority": "LowerPriority", "any": "Any"}
_QUEUEING = {"best_effort_fifo": "BestEffortFIFO", "strict_fifo": "StrictFIFO"}


class ExportError(ValueError):
    """The configuration cannot be expressed as Kubernetes objects; the message names the
    field and the fix."""


def _meta(name: str, **extra: Any) -> Obj:
    return {"name": name, **extra, "labels": dict(MANAGED_BY)}


# --- ResourceFlavors -----------------------------------------------------------------------


def _pool_labels(where: str, value: object) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ExportError(
            f"{where}: expected a mapping of node label to value, e.g. "
            "{cloud.google.com/gke-accelerator: nvidia-h100-80gb}"
        )
    return dict(value)


def _pool_taints(where: str, value: object) -> list[Obj]:
    hint = "e.g. [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]"
    if not isinstance(value, list):
        raise ExportError(f"{where}: expected a list of taints, {hint}")
    taints = []
    for i, taint in enumerate(value):
        if (
            not isinstance(taint, Mapping)
            or set(taint) - {"key", "value", "effect"}
            or not isinstance(taint.get("key"), str)
            or not isinstance(taint.get("value", ""), str)
        ):
            raise ExportError(f"{where}[{i}]: expected {{key, value, effect}}, {hint}")
        if taint.get("effect") not in TAINT_EFFECTS:
            raise ExportError(f"{where}[{i}].effect: expected one of {', '.join(TAINT_EFFECTS)}")
        taints.append({k: taint[k] for k in ("key", "value", "effect") if taint.get(k)})
    return sorted(taints, key=lambda t: (t["key"], t.get("value", ""), t["effect"]))


def flavor_placement(config: ClusterConfig, gpu_type: str) -> tuple[dict[str, str], list[Obj]]:
    """The node labels and taints of ``gpu_type``'s flavor (see the module docstring)."""
    labels: dict[str, str] | None = None
    taints: list[Obj] | None = None
    taints_from = ""
    for i, pool in enumerate(config.pools):
        if pool.backend != "kubernetes" or pool.gpu_type != gpu_type:
            continue
        where = f"pools[{i}].options"
        if "node_labels" in pool.options:
            own = _pool_labels(f"{where}.node_labels", pool.options["node_labels"])
            labels = own if labels is None else {k: v for k, v in labels.items() if own.get(k) == v}
            if not labels:
                raise ExportError(
                    f"{where}.node_labels: the kubernetes pools of gpu type {gpu_type!r} share "
                    "no node label; give them a common one (e.g. gpupool.io/gpu-type: "
                    f"{gpu_type}) so that its flavor selects their nodes"
                )
        own_taints = _pool_taints(f"{where}.node_taints", pool.options.get("node_taints", []))
        if taints is not None and own_taints != taints:
            raise ExportError(
                f"{where}.node_taints: differ from those of pool {taints_from!r} of the same gpu "
                f"type {gpu_type!r}; a flavor has one set of taints, so give them the same taints"
            )
        taints, taints_from = own_taints, pool.name
    return dict(sorted((labels or {GPU_TYPE_LABEL: gpu_type}).items())), taints or []


def _toleration(taint: Obj) -> Obj:
    if "value" in taint:
        return {
            "key": taint["key"],
            "operator": "Equal",
            "value": taint["value"],
            "effect": taint["effect"],
        }
    return {"key": taint["key"], "operator": "Exists", "effect": taint["effect"]}


def resource_flavors(config: ClusterConfig) -> list[Obj]:
    flavors = []
    for gpu_type in config.gpu_type_order():
        labels, taints = flavor_placement(config, gpu_type)
        spec: Obj = {"nodeLabels": labels}
        if taints:
            spec["nodeTaints"] = taints
            spec["tolerations"] = [_toleration(t) for t in taints]
        flavors.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "ResourceFlavor",
                "metadata": _meta(gpu_type),
                "spec": spec,
            }
        )
    return flavors


# --- Cohorts and ClusterQueues ---------------------------------------------------------------


def cohorts(config: ClusterConfig) -> list[Obj]:
    return [
        {"apiVersion": KUEUE_API, "kind": "Cohort", "metadata": _meta(name), "spec": {}}
        for name in sorted(config.cohorts)
    ]


def _preemption(policy: Preemption, where: str) -> Obj:
    mapped: Obj = {
        "withinClusterQueue": _WITHIN[policy.within_team],
        "reclaimWithinCohort": _RECLAIM[policy.reclaim],
        "borrowWithinCohort": {"policy": _WITHIN[policy.borrow_within_cohort.policy]},
    }
    threshold = policy.borrow_within_cohort.max_priority_threshold
    if threshold is not None:
        mapped["borrowWithinCohort"]["maxPriorityThreshold"] = threshold
    if policy.reclaim == "never" and policy.borrow_within_cohort.policy != "never":
        raise ExportError(
            f"{where}.preemption: Kueue does not allow preempting to borrow "
            "(borrow_within_cohort) when reclaim is never; set reclaim to lower_priority or any, "
            "or borrow_within_cohort.policy to never"
        )
    return mapped


def _per_gpu(config: ClusterConfig, gpu_type: str) -> tuple[float, float]:
    """CPUs and GB of memory per GPU on the type's pools (0 on a type without GPUs)."""
    pools = [p for p in config.pools if p.gpu_type == gpu_type]
    gpus = sum(p.nodes * p.node.gpus for p in pools)
    if not gpus:
        return 0.0, 0.0
    cpus = sum(p.nodes * p.node.cpus for p in pools)
    memory = sum(p.nodes * p.node.memory_gb for p in pools)
    return cpus / gpus, memory / gpus


def _flavor_quotas(config: ClusterConfig, team: str, gpu_type: str, in_cohort: bool) -> Obj:
    quota = config.teams[team].quota.get(gpu_type)
    nominal = quota.nominal if quota else 0
    borrowing = quota.borrowing_limit if quota else None
    lending = quota.lending_limit if quota else None
    cpus_per_gpu, memory_per_gpu = _per_gpu(config, gpu_type)
    cap_cpus, cap_memory = config.gpuless_caps()[team][gpu_type]

    def resource(name: str, nominal_value: Any, per_gpu: float, fmt: Any) -> Obj:
        entry: Obj = {"name": name, "nominalQuota": nominal_value}
        if not in_cohort:  # borrowing and lending need a cohort; Kueue forbids borrowingLimit
            return entry
        if per_gpu == 0 and name != GPU_RESOURCE:
            entry["borrowingLimit"] = fmt(0)  # GPU-less work never borrows in gpupool
        elif borrowing is not None:
            entry["borrowingLimit"] = fmt(borrowing * per_gpu) if per_gpu else borrowing
        if lending is not None:
            entry["lendingLimit"] = fmt(lending * per_gpu) if per_gpu else lending
        return entry

    return {
        "name": gpu_type,
        "resources": [
            resource(
                "cpu",
                cpu_quantity(max(nominal * cpus_per_gpu, cap_cpus)),
                cpus_per_gpu,
                cpu_quantity,
            ),
            resource(
                "memory",
                memory_quantity(max(nominal * memory_per_gpu, cap_memory)),
                memory_per_gpu,
                memory_quantity,
            ),
            resource(GPU_RESOURCE, nominal, 1.0, int),
        ],
    }


def cluster_queues(config: ClusterConfig) -> list[Obj]:
    queues = []
    for team in sorted(config.teams):
        spec_of = config.teams[team]
        in_cohort = spec_of.cohort is not None
        if in_cohort:
            assert spec_of.cohort is not None
            policy = config.cohorts[spec_of.cohort].preemption
            where = f"cohorts.{spec_of.cohort}"
        else:
            policy, where = config.scheduler.preemption, "scheduler"
        spec: Obj = {}
        if in_cohort:
            spec["cohortName"] = spec_of.cohort
        spec |= {
            "namespaceSelector": {"matchLabels": {TEAM_LABEL: team}},
            "queueingStrategy": _QUEUEING[config.scheduler.queueing],
            "preemption": _preemption(policy, where),
            "fairSharing": {"weight": weight_quantity(spec_of.weight)},
            "resourceGroups": [
                {
                    "coveredResources": list(COVERED),
                    "flavors": [
                        _flavor_quotas(config, team, gpu_type, in_cohort)
                        for gpu_type in config.gpu_type_order()
                    ],
                }
            ],
        }
        queues.append(
            {"apiVersion": KUEUE_API, "kind": "ClusterQueue", "metadata": _meta(team), "spec": spec}
        )
    return queues


def local_queue(team: str, namespace: str) -> Obj:
    meta = _meta(LOCAL_QUEUE, namespace=namespace)
    meta["labels"] = dict(sorted({**meta["labels"], TEAM_LABEL: team}.items()))
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": meta,
        "spec": {"clusterQueue": team},
    }


def workload_priority_classes(config: ClusterConfig) -> list[Obj]:
    default = config.default_priority_class()
    found = []
    for name, cls in sorted(config.priority_classes.items(), key=lambda kv: (-kv[1].value, kv[0])):
        if not -(2**31) <= cls.value < 2**31:
            raise ExportError(
                f"priority_classes.{name}.value: {cls.value} does not fit Kubernetes' 32-bit "
                "priorities; use a value between -2147483648 and 2147483647"
            )
        note = " (the default)" if name == default else ""
        found.append(
            {
                "apiVersion": KUEUE_API,
                "kind": "WorkloadPriorityClass",
                "metadata": _meta(name),
                "value": cls.value,
                "description": f"gpupool priority class {name}{note}",
            }
        )
    return found
