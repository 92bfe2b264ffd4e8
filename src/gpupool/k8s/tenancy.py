"""Per-team tenancy objects: the Namespace, Roles and RoleBindings, and NetworkPolicies.

Roles follow gpupool's (``auth.principal``): ``viewer`` reads, ``member`` also creates and
deletes the team's workloads, ``admin`` also manages its secrets. Members of the team's
identity-provider ``groups`` are members, as in gpupool; users named under ``members:`` are
bound to their own role; ``platform_admin_groups`` are admins of every team. No role may exec
into or attach to pods: a member could otherwise act as another member's uid inside that
member's pod, which the POSIX identity the webhook stamps exists to prevent.

Network: ingress is denied by default and allowed from the same namespace and from the
platform namespaces given (gpupool, monitoring); egress is left open.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpupool.k8s.names import (
    COHORT_LABEL,
    MANAGED_BY,
    NAMESPACE_NAME_LABEL,
    POD_SECURITY_LABEL,
    TEAM_LABEL,
)
from gpupool.spec.models import ClusterConfig, Team

Obj = dict[str, Any]
READ = ["get", "list", "watch"]
WRITE = ["create", "update", "patch", "delete", "deletecollection"]

# (api group, resources) each role reads; what members and admins may also change.
_READABLE = [
    ("", ["pods", "pods/log", "events", "configmaps", "persistentvolumeclaims", "services"]),
    ("batch", ["jobs", "cronjobs"]),
    ("kueue.x-k8s.io", ["workloads", "localqueues"]),
]
_MEMBER_WRITES = [
    ("", ["pods", "configmaps", "persistentvolumeclaims"]),
    ("batch", ["jobs", "cronjobs"]),
]
_ADMIN_WRITES = [("", ["secrets", "services"])]
_ADMIN_READS = [
    ("", ["secrets", "serviceaccounts"]),
    ("rbac.authorization.k8s.io", ["rolebindings"]),
]


def team_labels(team: str, spec: Team) -> dict[str, str]:
    labels = {TEAM_LABEL: team, **MANAGED_BY}
    if spec.cohort is not None:
        labels[COHORT_LABEL] = spec.cohort
    return dict(sorted(labels.items()))


def _meta(name: str, namespace: str, team: str, spec: Team) -> Obj:
    return {"name": name, "namespace": namespace, "labels": team_labels(team, spec)}


def namespace(team: str, spec: Team, name: str, pod_security: str | None = None) -> Obj:
    """``pod_security``: the Pod Security Standard the namespace enforces. ``baseline`` already
    refuses what would step around the uid the webhook stamps (privileged containers, host
    paths, the host's namespaces)."""
    labels = team_labels(team, spec)
    if pod_security is not None:
        labels = dict(sorted({**labels, POD_SECURITY_LABEL: pod_security}.items()))
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def _rules(grants: Sequence[tuple[str, list[str]]], verbs: list[str]) -> list[Obj]:
    return [
        {"apiGroups": [group], "resources": resources, "verbs": verbs}
        for group, resources in grants
    ]


def roles(team: str, spec: Team, ns: str) -> list[Obj]:
    rules = {
        "viewer": _rules(_READABLE, READ),
        "member": _rules(_READABLE, READ) + _rules(_MEMBER_WRITES, WRITE),
        "admin": _rules(_READABLE, READ)
        + _rules(_MEMBER_WRITES, WRITE)
        + _rules(_ADMIN_READS, READ)
        + _rules(_ADMIN_WRITES, WRITE),
    }
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(f"gpupool-{role}", ns, team, spec),
            "rules": rules[role],
        }
        for role in ("admin", "member", "viewer")
    ]


def role_bindings(
    team: str,
    spec: Team,
    ns: str,
    config: ClusterConfig,
    user_prefix: str = "",
    group_prefix: str = "",
) -> list[Obj]:
    """One binding per role. ``user_prefix``/``group_prefix`` are what the API server puts in
    front of the identity provider's names (``--oidc-username-prefix``/``--oidc-groups-prefix``).
    """

    def group(name: str) -> Obj:
        return {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Group",
            "name": group_prefix + name,
        }

    def user(name: str) -> Obj:
        return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user_prefix + name}

    platform_admins = sorted(name for name, u in config.users.items() if u.platform_admin)
    subjects: dict[str, list[Obj]] = {
        "admin": [group(g) for g in sorted(config.platform_admin_groups)]
        + [user(name) for name in platform_admins if name not in spec.members],
        "member": [group(g) for g in sorted(spec.groups)],
        "viewer": [],
    }
    for name, role in sorted(spec.members.items()):
        subjects[role].append(user(name))
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(f"gpupool-{role}", ns, team, spec),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": f"gpupool-{role}",
            },
            "subjects": subjects[role],
        }
        for role in ("admin", "member", "viewer")
    ]


def network_policies(team: str, spec: Team, ns: str, allow_from: Sequence[str]) -> list[Obj]:
    def policy(name: str, ingress: list[Obj] | None) -> Obj:
        body: Obj = {"podSelector": {}, "policyTypes": ["Ingress"]}
        if ingress is not None:
            body["ingress"] = ingress
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _meta(name, ns, team, spec),
            "spec": body,
        }

    found = [
        policy("default-deny-ingress", None),
        policy("allow-same-namespace", [{"from": [{"podSelector": {}}]}]),
    ]
    if allow_from:
        sources = [
            {"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: other}}}
            for other in sorted(set(allow_from))
        ]
        found.append(policy("allow-from-platform", [{"from": sources}]))
    return found
