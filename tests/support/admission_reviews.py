"""AdmissionReview v1 requests as the API server sends them to a mutating webhook.

The objects are what the webhook sees: after the API server has applied defaults (an empty
``securityContext``, ``terminationMessagePath``, the default service account, ...) and with
``creationTimestamp: null``, as on the wire. Builders take overrides for what a case changes.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

Obj = dict[str, Any]


def container(name: str = "main", security: Obj | None = None) -> Obj:
    found: Obj = {
        "name": name,
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["python", "train.py"],
        "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    if security is not None:
        found["securityContext"] = security
    return found


def pod_spec(security: Obj | None = None, containers: list[Obj] | None = None, **extra: Any) -> Obj:
    return {
        "containers": containers if containers is not None else [container()],
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "securityContext": {} if security is None else security,
        "schedulerName": "default-scheduler",
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300},
        ],
        "priority": 0,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        **extra,
    }  # fmt: skip


def pod(namespace: str = "team-a", name: str | None = "train-1", **spec: Any) -> Obj:
    meta: Obj = {"namespace": namespace, "creationTimestamp": None, "labels": {"app": "train"}}
    if name is None:
        meta["generateName"] = "train-"
    else:
        meta["name"] = name
    return {"kind": "Pod", "apiVersion": "v1", "metadata": meta, "spec": pod_spec(**spec),
            "status": {}}  # fmt: skip


def job(namespace: str = "team-a", name: str = "train", **spec: Any) -> Obj:
    return {
        "kind": "Job",
        "apiVersion": "batch/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None,
                     "labels": {"kueue.x-k8s.io/queue-name": "default"}},
        "spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 6, "completionMode": "NonIndexed",
            "suspend": True, "manualSelector": False, "podReplacementPolicy": "TerminatingOrFailed",
            "template": {"metadata": {"creationTimestamp": None}, "spec": pod_spec(**spec)},
        },
        "status": {},
    }  # fmt: skip


def cronjob(namespace: str = "team-a", name: str = "nightly", **spec: Any) -> Obj:
    template = job(namespace, name, **spec)
    return {
        "kind": "CronJob",
        "apiVersion": "batch/v1",
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": None},
        "spec": {
            "schedule": "0 3 * * *", "concurrencyPolicy": "Forbid", "suspend": False,
            "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
            "jobTemplate": {"metadata": {"creationTimestamp": None}, "spec": template["spec"]},
        },
        "status": {},
    }  # fmt: skip


_KINDS = {
    "Pod": ({"group": "", "version": "v1", "kind": "Pod"},
            {"group": "", "version": "v1", "resource": "pods"}),
    "Job": ({"group": "batch", "version": "v1", "kind": "Job"},
            {"group": "batch", "version": "v1", "resource": "jobs"}),
    "CronJob": ({"group": "batch", "version": "v1", "kind": "CronJob"},
                {"group": "batch", "version": "v1", "resource": "cronjobs"}),
}  # fmt: skip


def review(
    obj: Obj,
    operation: str = "CREATE",
    username: str = "alice",
    groups: tuple[str, ...] = ("TeamA",),
    old: Obj | None = None,
    dry_run: bool = False,
    sub_resource: str | None = None,
) -> Obj:
    kind, resource = _KINDS[obj["kind"]]
    options = {
        "CREATE": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1",
                   "fieldManager": "kubectl-client-side-apply", "fieldValidation": "Strict"},
        "UPDATE": {"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1",
                   "fieldManager": "kubectl-edit", "fieldValidation": "Strict"},
        "DELETE": {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1",
                   "propagationPolicy": "Background"},
    }[operation]  # fmt: skip
    request: Obj = {
        "uid": str(uuid.uuid4()),
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "namespace": obj["metadata"]["namespace"],
        "operation": operation,
        "userInfo": {
            "username": username,
            "uid": "4f6e3c1a-0000-4000-8000-000000000001",
            "groups": [*groups, "system:authenticated"],
            "extra": {"authentication.kubernetes.io/credential-id": ["JTI=0123"]},
        },
        "object": None if operation == "DELETE" else copy.deepcopy(obj),
        "oldObject": copy.deepcopy(old) if old is not None else None,
        "dryRun": dry_run,
        "options": options,
    }
    if "name" in obj["metadata"]:
        request["name"] = obj["metadata"]["name"]
    if sub_resource:
        request["subResource"] = sub_resource
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": request}


def without_nulls(value: Any) -> Any:
    """The object as the API server stores it: a null field is an unset one."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value
