"""``gpupool export kubernetes``: the cluster configuration as Kubernetes manifests.

:func:`render` is pure: configuration and settings in, ``{file name: [objects]}`` out, objects
as plain dicts. The output is deterministic: files in the order they are to be applied (their
names sort that way, so ``kubectl apply -f DIR`` follows it), objects within a file by team or
name, keys in a fixed order. :func:`to_yaml` writes a file's objects as one multi-document YAML.

Apply order: Kueue's CRDs (installing Kueue) must come first; then namespaces, RBAC and network
policies; the Kueue objects (a LocalQueue needs its namespace); the webhook configuration last,
once the webhook is running, since it fails closed.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpupool.k8s import controller_rbac, kueue, tenancy
from gpupool.k8s.kueue import ExportError
from gpupool.k8s.names import MANAGED_BY, TEAM_LABEL, is_reserved_namespace, team_namespace
from gpupool.spec.models import ClusterConfig

Obj = dict[str, Any]
WEBHOOK_PATH = "/mutate"
WEBHOOK_CONFIGURATION = "gpupool-posix-identity"

__all__ = ["ExportError", "ExportSettings", "render", "to_yaml", "webhook_configuration"]


@dataclass(frozen=True)
class ExportSettings:
    # Namespaces whose pods may reach every team's pods (gpupool itself, Prometheus, ...).
    allow_from_namespaces: Sequence[str] = ("gpupool-system",)
    # The Pod Security Standard team namespaces enforce (None: no label).
    pod_security: str | None = "baseline"
    # What the API server puts in front of the identity provider's user and group names.
    user_prefix: str = ""
    group_prefix: str = ""
    # Where the webhook runs: a Service in front of `gpupool webhook serve`.
    webhook_namespace: str = "gpupool-system"
    webhook_service: str = "gpupool-webhook"
    webhook_port: int = 443
    webhook_ca_bundle: bytes | None = field(default=None, repr=False)  # PEM of the serving CA
    webhook_timeout_s: int = 10
    # NAMESPACE/NAME of the service account gpupool's controller runs as (None: no RBAC for it).
    controller_account: str | None = "gpupool-system/gpupool"


def webhook_configuration(settings: ExportSettings) -> Obj:
    """Pods, Jobs and CronJobs created in team namespaces go to the webhook; it fails closed (an
    unreachable webhook admits nothing there) and has no side effects, so dry runs call it."""
    client: Obj = {
        "service": {
            "namespace": settings.webhook_namespace,
            "name": settings.webhook_service,
            "path": WEBHOOK_PATH,
            "port": settings.webhook_port,
        }
    }
    if settings.webhook_ca_bundle is not None:
        client["caBundle"] = base64.b64encode(settings.webhook_ca_bundle).decode("ascii")
    rule = {"operations": ["CREATE"], "scope": "Namespaced"}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION, "labels": dict(MANAGED_BY)},
        "webhooks": [
            {
                "name": "posix-identity.gpupool.io",
                "admissionReviewVersions": ["v1"],
                "clientConfig": client,
                "failurePolicy": "Fail",
                "matchPolicy": "Equivalent",
                "namespaceSelector": {
                    "matchExpressions": [{"key": TEAM_LABEL, "operator": "Exists"}]
                },
                # Another mutating webhook that runs after this one may change the securityContext.
                "reinvocationPolicy": "IfNeeded",
                "rules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], **rule},
                    {
                        "apiGroups": ["batch"],
                        "apiVersions": ["v1"],
                        "resources": ["cronjobs", "jobs"],
                        **rule,
                    },
                ],
                "sideEffects": "None",
                "timeoutSeconds": settings.webhook_timeout_s,
            }
        ],
    }


def _check_namespaces(config: ClusterConfig) -> None:
    for team in config.teams:
        if is_reserved_namespace(team_namespace(team)):
            raise ExportError(
                f"teams.{team}: its namespace would be {team_namespace(team)!r}, which belongs to "
                "Kubernetes itself; rename the team"
            )


def _controller_account(settings: ExportSettings) -> tuple[str, str] | None:
    if settings.controller_account is None:
        return None
    try:
        return controller_rbac.parse_account(settings.controller_account)
    except ValueError as exc:
        raise ExportError(f"the controller's service account: {exc}") from None


def render(config: ClusterConfig, settings: ExportSettings | None = None) -> dict[str, list[Obj]]:
    """Every object, grouped in files named for their kind, in the order to apply them."""
    settings = settings or ExportSettings()
    _check_namespaces(config)
    teams = sorted(config.teams)
    spaces = {team: team_namespace(team) for team in teams}
    account = _controller_account(settings)
    roles: list[Obj] = []
    bindings: list[Obj] = []
    for t in teams:
        spec = config.teams[t]
        roles += tenancy.roles(t, spec, spaces[t])
        bindings += tenancy.role_bindings(
            t, spec, spaces[t], config, settings.user_prefix, settings.group_prefix
        )
        if account is not None:
            labels = tenancy.team_labels(t, spec)
            role, binding = controller_rbac.namespaced(spaces[t], labels, account)
            roles.append(role)
            bindings.append(binding)
    cluster = list(controller_rbac.cluster_wide(account)) if account is not None else []
    files: dict[str, list[Obj]] = {
        "00-namespaces.yaml": [
            tenancy.namespace(t, config.teams[t], spaces[t], settings.pod_security) for t in teams
        ],
        "10-roles.yaml": roles,
        "11-rolebindings.yaml": bindings,
        "12-clusterroles.yaml": cluster[:1],
        "13-clusterrolebindings.yaml": cluster[1:],
        "20-networkpolicies.yaml": [
            policy
            for t in teams
            for policy in tenancy.network_policies(
                t, config.teams[t], spaces[t], settings.allow_from_namespaces
            )
        ],
        "30-resourceflavors.yaml": kueue.resource_flavors(config),
        "31-cohorts.yaml": kueue.cohorts(config),
        "32-clusterqueues.yaml": kueue.cluster_queues(config),
        "33-localqueues.yaml": [kueue.local_queue(t, spaces[t]) for t in teams],
        "34-workloadpriorityclasses.yaml": kueue.workload_priority_classes(config),
        "90-mutatingwebhookconfiguration.yaml": [webhook_configuration(settings)],
    }
    return {name: objects for name, objects in files.items() if objects}


class _Dumper(yaml.SafeDumper):
    """Block style, keys in the order built (not sorted), no aliases for repeated lists."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def to_yaml(objects: Sequence[Obj]) -> str:
    return yaml.dump_all(
        objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, explicit_start=True
    )
