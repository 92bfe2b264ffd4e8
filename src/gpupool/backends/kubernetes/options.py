"""The ``options:`` of a Kubernetes pool, validated once when the adapter is built (and by
``gpupool config validate`` through :mod:`gpupool.backends.options`). No I/O, no SDK import.

Unknown keys are an error, and every message names the option and what to write instead.
``node_labels`` and ``node_taints`` mean the same as for the Kueue export: the labels select the
pool's nodes (``nodeSelector``) and every taint is tolerated by the pool's pods.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from gpupool.backends.errors import BackendMisconfigured

GPU_TYPE_LABEL = "gpupool.io/gpu-type"  # the node label a pool selects when it names none
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_LABEL_NAME = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)\Z")
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_PATH = re.compile(r"/[A-Za-z0-9._/+-]*\Z")
_RESOURCE = re.compile(r"([a-z0-9.-]+/)?[A-Za-z0-9][-A-Za-z0-9_.]*\Z")
_HINT_LABELS = "e.g. node_labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}"
_HINT_TAINTS = "e.g. node_taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]"


def _bad(option: str, problem: str, fix: str) -> BackendMisconfigured:
    return BackendMisconfigured(f"kubernetes pool option {option}: {problem}; {fix}")


def is_label_key(key: str) -> bool:
    """A Kubernetes label key: ``[prefix/]name``, prefix a DNS subdomain, name <= 63 chars."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _PREFIX.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_LABEL_NAME.match(name))


def is_label_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and bool(_LABEL_NAME.match(value)))


def is_dns_label(name: str) -> bool:
    return len(name) <= 63 and bool(_DNS_LABEL.match(name))


@dataclass(frozen=True)
class Taint:
    key: str
    effect: str
    value: str | None = None

    def toleration(self) -> dict[str, str]:
        if self.value is None:
            return {"key": self.key, "operator": "Exists", "effect": self.effect}
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


@dataclass(frozen=True)
class KubernetesOptions:
    kubeconfig: str | None = None  # a kubeconfig file; default ~/.kube/config (or $KUBECONFIG)
    context: str | None = None  # a context of that kubeconfig; default its current one
    in_cluster: bool = False  # the service account of the pod gpupool runs in
    namespace: str = "{team}"  # template: {team} and {pool} are replaced
    node_labels: Mapping[str, str] = field(default_factory=dict)  # default gpupool.io/gpu-type
    node_taints: tuple[Taint, ...] = ()  # tolerated by every pod of the pool
    image: str | None = None  # the image of jobs that name none
    workdir_root: str | None = None  # shared by the control plane and the nodes, same path
    workdir_claim: str | None = None  # a PersistentVolumeClaim (in each team namespace) instead
    gpu_resource: str = "nvidia.com/gpu"
    stop_grace_s: int = 30  # the pods' terminationGracePeriodSeconds (max_runtime, evictions)
    ttl_after_finished_s: int | None = 7 * 24 * 3600  # a finished Job is kept this long
    request_timeout_s: float = 30.0  # per API request
    job_name_prefix: str = "gpupool-"  # distinct per installation when they share a cluster
    run_without_identity: bool = False  # jobs of users without uid/gid run as the image's user

    @classmethod
    def parse(cls, raw: Mapping[str, Any], gpu_type: str = "") -> KubernetesOptions:
        known = sorted(f.name for f in fields(cls))
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise BackendMisconfigured(
                f"unknown kubernetes pool options: {', '.join(unknown)}; known: {', '.join(known)}"
            )
        values: dict[str, Any] = dict(raw)
        for name in ("kubeconfig", "context", "image", "workdir_root", "workdir_claim"):
            if values.get(name) is not None and not (
                isinstance(values[name], str) and values[name]
            ):
                raise _bad(name, f"expected a non-empty string, got {values[name]!r}", "quote it")
        for name in ("namespace", "gpu_resource", "job_name_prefix"):
            if name in values and not isinstance(values[name], str):
                raise _bad(name, f"expected a string, got {values[name]!r}", "quote it")
        for name in ("in_cluster", "run_without_identity"):
            if not isinstance(values.get(name, False), bool):
                raise _bad(
                    name, f"expected true or false, got {values[name]!r}", "write true/false"
                )
        for name, low in (("stop_grace_s", 0), ("ttl_after_finished_s", 0)):
            value = values.get(name, 0)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise _bad(name, f"expected whole seconds, got {value!r}", f"e.g. {name}: 30")
            if value is not None and value < low:
                raise _bad(name, f"must not be negative, got {value}", f"e.g. {name}: 30")
        timeout = values.get("request_timeout_s", 30.0)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise _bad(
                "request_timeout_s", f"expected positive seconds, got {timeout!r}", "e.g. 30"
            )
        values["request_timeout_s"] = float(timeout)
        values["node_labels"] = _labels(values.get("node_labels"), gpu_type)
        values["node_taints"] = _taints(values.get("node_taints", []))
        options = cls(**values)
        options._check()
        return options

    def _check(self) -> None:
        if self.in_cluster and (self.kubeconfig or self.context):
            raise _bad(
                "in_cluster",
                "excludes kubeconfig and context",
                "use either in_cluster: true (gpupool runs in a pod) or a kubeconfig",
            )
        sample = self.namespace_for("team-a", "pool")
        if not is_dns_label(sample):
            raise _bad(
                "namespace",
                f"{self.namespace!r} gives {sample!r} for team 'team-a', not a DNS label",
                "use lower-case letters, digits, '-' and {team}/{pool}, e.g. namespace: gpu-{team}",
            )
        if self.job_name_prefix and not re.fullmatch(
            r"[a-z0-9]([-a-z0-9]{0,14})", self.job_name_prefix
        ):
            raise _bad(
                "job_name_prefix",
                f"{self.job_name_prefix!r} is not the start of a DNS label of at most 15 chars",
                "use lower-case letters, digits and '-', e.g. job_name_prefix: gpupool-",
            )
        if not _RESOURCE.match(self.gpu_resource):
            raise _bad(
                "gpu_resource",
                f"{self.gpu_resource!r} is not a resource name",
                "e.g. gpu_resource: nvidia.com/gpu",
            )
        if self.workdir_root is not None and not _PATH.match(self.workdir_root):
            raise _bad(
                "workdir_root",
                f"{self.workdir_root!r} is not an absolute path of plain characters",
                "use a path such as /shared/gpupool, mounted at the same path on every node",
            )
        if self.workdir_claim is not None and not is_dns_label(self.workdir_claim):
            raise _bad(
                "workdir_claim",
                f"{self.workdir_claim!r} is not a claim name",
                "name a PersistentVolumeClaim of each team namespace",
            )

    def namespace_for(self, team: str, pool: str) -> str:
        return self.namespace.replace("{team}", team).replace("{pool}", pool)

    def root(self, state_dir: Path, pool: str) -> Path:
        """Where attempt directories live on the control plane (and, same path, on nodes)."""
        if self.workdir_root:
            return Path(self.workdir_root)
        return (Path(state_dir) / "kubernetes" / pool).absolute()


def _labels(raw: object, gpu_type: str) -> dict[str, str]:
    if raw is None or raw == {}:
        return {GPU_TYPE_LABEL: gpu_type} if gpu_type else {}
    if not isinstance(raw, Mapping):
        raise _bad(
            "node_labels", f"expected a mapping of label to value, got {raw!r}", _HINT_LABELS
        )
    labels: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not is_label_key(key):
            raise _bad("node_labels", f"{key!r} is not a label key", _HINT_LABELS)
        if not isinstance(value, str) or not is_label_value(value):
            raise _bad(
                f"node_labels.{key}",
                f"{value!r} is not a label value (quote numbers)",
                _HINT_LABELS,
            )
        labels[key] = value
    return dict(sorted(labels.items()))


def _taints(raw: object) -> tuple[Taint, ...]:
    if isinstance(raw, tuple) and all(isinstance(t, Taint) for t in raw):
        return raw
    if not isinstance(raw, list):
        raise _bad("node_taints", f"expected a list of taints, got {raw!r}", _HINT_TAINTS)
    taints = []
    for i, item in enumerate(raw):
        where = f"node_taints[{i}]"
        if not isinstance(item, Mapping) or set(item) - {"key", "value", "effect"}:
            raise _bad(where, f"expected {{key, value, effect}}, got {item!r}", _HINT_TAINTS)
        key, value, effect = item.get("key"), item.get("value"), item.get("effect")
        if not isinstance(key, str) or not is_label_key(key):
            raise _bad(f"{where}.key", f"{key!r} is not a taint key", _HINT_TAINTS)
        if value is not None and (not isinstance(value, str) or not is_label_value(value)):
            raise _bad(f"{where}.value", f"{value!r} is not a taint value", _HINT_TAINTS)
        if effect not in TAINT_EFFECTS:
            raise _bad(
                f"{where}.effect",
                f"{effect!r} is not one of {', '.join(TAINT_EFFECTS)}",
                _HINT_TAINTS,
            )
        taints.append(Taint(key=key, effect=effect, value=value or None))
    return tuple(sorted(taints, key=lambda t: (t.key, t.value or "", t.effect)))
