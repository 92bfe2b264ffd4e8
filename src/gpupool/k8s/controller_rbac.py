"""What gpupool's own controller may do on the cluster when it runs teams' jobs there (the
``kubernetes`` backend), as RBAC for its service account.

Least privilege, split by scope: it reads Jobs, pods and nodes cluster-wide (one list call per
poll across team namespaces, and the nodes' GPUs for capacity), but creates and deletes Jobs,
deletes pods and reads logs only in team namespaces, through a Role and RoleBinding in each.
"""

from __future__ import annotations

from typing import Any

from gpupool.k8s.names import MANAGED_BY

Obj = dict[str, Any]
NAME = "gpupool-controller"
RBAC = "rbac.authorization.k8s.io/v1"
READ = ["get", "list", "watch"]


def parse_account(value: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` of a service account; ``ValueError`` saying what to write."""
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise ValueError(f"{value!r} is not NAMESPACE/NAME, e.g. gpupool-system/gpupool")
    return namespace, name


def _subject(account: tuple[str, str]) -> Obj:
    return {"kind": "ServiceAccount", "name": account[1], "namespace": account[0]}


def namespaced(ns: str, labels: dict[str, str], account: tuple[str, str]) -> tuple[Obj, Obj]:
    """The Role and RoleBinding of the controller in one team namespace."""
    meta = {"name": NAME, "namespace": ns, "labels": dict(labels)}
    role = {
        "apiVersion": RBAC,
        "kind": "Role",
        "metadata": meta,
        "rules": [
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "delete", "get"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete", "deletecollection"]},
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        ],
    }
    binding = {
        "apiVersion": RBAC,
        "kind": "RoleBinding",
        "metadata": {**meta, "labels": dict(labels)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
        "subjects": [_subject(account)],
    }
    return role, binding


def cluster_wide(account: tuple[str, str]) -> tuple[Obj, Obj]:
    """The ClusterRole and ClusterRoleBinding of the controller's cluster-wide reads."""
    meta = {"name": NAME, "labels": dict(MANAGED_BY)}
    role = {
        "apiVersion": RBAC,
        "kind": "ClusterRole",
        "metadata": meta,
        "rules": [
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": READ},
            {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": READ},
        ],
    }
    binding = {
        "apiVersion": RBAC,
        "kind": "ClusterRoleBinding",
        "metadata": {"name": NAME, "labels": dict(MANAGED_BY)},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
        "subjects": [_subject(account)],
    }
    return role, binding
