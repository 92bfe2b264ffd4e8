"""Names, labels and quantities shared by the exported manifests and the webhook.

Invariants: a team's namespace is named after the team (team names are DNS labels already), and
carries :data:`TEAM_LABEL`; the webhook, the ClusterQueues' namespace selectors and the webhook
configuration's namespace selector all recognise team namespaces by that label or that name, so
renaming either is a change to all three.
"""

from __future__ import annotations

TEAM_LABEL = "gpupool.io/team"
COHORT_LABEL = "gpupool.io/cohort"
GPU_TYPE_LABEL = "gpupool.io/gpu-type"  # a ResourceFlavor's node label when its pools give none
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpupool"}
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by the API server on every namespace
POD_SECURITY_LABEL = "pod-security.kubernetes.io/enforce"
POD_SECURITY_LEVELS = ("privileged", "baseline", "restricted")

KUEUE_API = "kueue.x-k8s.io/v1beta2"
KUEUE_RELEASE = "v0.19.2"  # the release whose CRD schemas the output is tested against
GPU_RESOURCE = "nvidia.com/gpu"
LOCAL_QUEUE = "default"  # Kueue's LocalQueueDefaulting picks a queue of this name

# Namespaces a team must not be mapped onto: they exist on every cluster and belong to it.
RESERVED_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})


def team_namespace(team: str) -> str:
    return team


def is_reserved_namespace(name: str) -> bool:
    return name in RESERVED_NAMESPACES or name.startswith("kube-")


def cpu_quantity(cpus: float) -> str:
    """Whole CPUs as ``"16"``, fractions in millicores (``"8500m"``), as Kubernetes writes them."""
    millis = round(cpus * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def memory_quantity(gb: float) -> str:
    """Gigabytes (10^9, as gpupool's ``memory_gb``) as ``"64G"``, fractions in megabytes."""
    mb = round(gb * 1000)
    return f"{mb // 1000}G" if mb % 1000 == 0 else f"{mb}M"


def weight_quantity(weight: float) -> str:
    """A fair-sharing weight as a Kubernetes quantity string (``"1"``, ``"1.5"``)."""
    return str(int(weight)) if float(weight).is_integer() else f"{weight:g}"
