"""``gpupool.k8s.export``: the demo against golden files, every object of many configurations
against the Kubernetes and Kueue schemas, the quota and access mapping, and clear refusals.

Regenerate the golden files after an intended change with
``GPUPOOL_UPDATE_GOLDEN=1 pytest tests/unit/k8s/test_export.py`` and review the diff.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.k8s.export import ExportError, ExportSettings, render, to_yaml
from gpupool.spec.load import load_config
from gpupool.spec.models import ClusterConfig
from support.k8s_schemas import problems

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = Path(__file__).parent / "testdata" / "demo"
DEMO = ROOT / "examples" / "demo.yaml"

BASE: dict[str, Any] = {
    "gpu_types": {"h100": {"price_per_gpu_hour": 4.0}, "t4": {}},
    "pools": [
        {
            "name": "h100-pool",
            "backend": "local",
            "gpu_type": "h100",
            "nodes": 2,
            "node": {"gpus": 8, "cpus": 96, "memory_gb": 1024},
        },
        {
            "name": "t4-pool",
            "backend": "local",
            "gpu_type": "t4",
            "node": {"gpus": 4, "cpus": 16, "memory_gb": 64},
        },
    ],
    "cohorts": {"research": {}},
    "teams": {
        "team-a": {"cohort": "research", "quota": {"h100": {"nominal": 4}}, "groups": ["TeamA"]},
        "team-b": {"cohort": "research", "quota": {"t4": {"nominal": 2}}},
    },
    "users": {"alice": {"uid": 10001, "gid": 20001}},
}


def merge(base: Any, change: Any) -> Any:
    if isinstance(base, dict) and isinstance(change, dict):
        out = dict(base)
        for key, value in change.items():
            out[key] = merge(base.get(key), value) if value is not None else None
        return {k: v for k, v in out.items() if v is not None}
    return copy.deepcopy(change)


def config_of(change: dict[str, Any] | None = None) -> ClusterConfig:
    # Model-level validation only: pools on the kubernetes backend are what these tests need,
    # whether or not an adapter is registered for it in this build.
    return ClusterConfig.model_validate(merge(BASE, change or {}))


def kubernetes_pool(name: str, gpu_type: str, **options: Any) -> dict[str, Any]:
    return {
        "name": name,
        "backend": "kubernetes",
        "gpu_type": gpu_type,
        "node": {"gpus": 8, "cpus": 96, "memory_gb": 1024},
        "options": options,
    }


def objects(config: ClusterConfig, settings: ExportSettings | None = None) -> list[dict[str, Any]]:
    return [obj for objs in render(config, settings).values() for obj in objs]


def find(
    config: ClusterConfig, kind: str, name: str, namespace: str | None = None
) -> dict[str, Any]:
    for obj in objects(config):
        meta = obj["metadata"]
        if obj["kind"] == kind and meta["name"] == name and meta.get("namespace") == namespace:
            return obj
    raise AssertionError(f"no {kind} {namespace}/{name}")


# --- golden files and schemas --------------------------------------------------------------


def test_demo_renders_as_the_golden_files() -> None:
    files = render(load_config(DEMO))
    if os.environ.get("GPUPOOL_UPDATE_GOLDEN"):
        for old in GOLDEN.glob("*.yaml"):
            old.unlink()
        for name, objs in files.items():
            (GOLDEN / name).write_text(to_yaml(objs), encoding="utf-8")
    assert sorted(files) == sorted(p.name for p in GOLDEN.glob("*.yaml"))
    for name, objs in files.items():
        assert to_yaml(objs) == (GOLDEN / name).read_text(encoding="utf-8"), name


@dataclass(frozen=True)
class Shape:
    change: dict[str, Any] = field(default_factory=dict)
    settings: ExportSettings = field(default_factory=ExportSettings)


SHAPES = [
    pytest.param(Shape(), id="two teams in a cohort"),
    pytest.param(
        Shape({"teams": {"solo": {"quota": {"t4": {"nominal": 1}}, "weight": 2.5}}}),
        id="a team without a cohort: no borrowing limit",
    ),
    pytest.param(
        Shape(
            {
                "teams": {
                    "team-a": {
                        "quota": {"h100": {"nominal": 4, "borrowing_limit": 2, "lending_limit": 1}}
                    }
                }
            }
        ),
        id="borrowing and lending limits",
    ),
    pytest.param(
        Shape(
            {
                "cohorts": {
                    "research": {
                        "preemption": {
                            "within_team": "never",
                            "reclaim": "lower_priority",
                            "borrow_within_cohort": {
                                "policy": "lower_priority",
                                "max_priority_threshold": 100,
                            },
                        }
                    }
                }
            }
        ),
        id="preempting to borrow below a threshold",
    ),
    pytest.param(
        Shape(
            {
                "pools": [
                    kubernetes_pool(
                        "k8s-h100",
                        "h100",
                        node_labels={"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                        node_taints=[
                            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                            {"key": "dedicated", "effect": "NoExecute"},
                        ],
                    )
                ]
            }
        ),
        id="a flavor's node labels and taints from a kubernetes pool",
    ),
    pytest.param(
        Shape(
            {
                "gpu_types": {"cpu": {}},
                "pools": [
                    {
                        "name": "cpus",
                        "backend": "local",
                        "gpu_type": "cpu",
                        "node": {"gpus": 0, "cpus": 64, "memory_gb": 256},
                    }
                ],
                "teams": {"team-b": {"quota": {"t4": {"nominal": 2}, "cpu": {"cpus": 12.5}}}},
            }
        ),
        id="a cpu type: fractional CPUs, GPU-less work never borrows",
    ),
    pytest.param(
        Shape(
            settings=ExportSettings(
                allow_from_namespaces=("monitoring", "gpupool-system"),
                user_prefix="oidc:",
                group_prefix="oidc:",
                webhook_ca_bundle=b"-----BEGIN CERTIFICATE-----\n",
            )
        ),
        id="prefixes, two platform namespaces and a CA bundle",
    ),
    pytest.param(
        Shape(
            {
                "platform_admin_groups": ["Ops"],
                "users": {"root-admin": {"uid": 10, "gid": 10, "platform_admin": True}},
                "teams": {"team-a": {"members": {"alice": "viewer", "bob": "admin"}}},
            }
        ),
        id="platform admins and explicit members",
    ),
]


@pytest.mark.parametrize("shape", SHAPES)
def test_every_object_is_valid_for_kubernetes_and_kueue(shape: Shape) -> None:
    found = {
        f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}": p
        for obj in objects(config_of(shape.change), shape.settings)
        if (p := problems(obj))
    }
    assert found == {}


def test_the_demo_objects_are_valid_too() -> None:
    assert [problems(obj) for obj in objects(load_config(DEMO)) if problems(obj)] == []


BAD_OBJECTS = [
    pytest.param(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "Team_A"}},
        "not a DNS subdomain",
        id="a bad name",
    ),
    pytest.param(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "x", "namespace": "a"},
        },
        "'roleRef' is a required",
        id="a binding without roleRef",
    ),
    pytest.param(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "x"},
            "spec": {"cohort": "a"},
        },
        "'cohort' was unexpected",
        id="a v1beta1 field in v1beta2",
    ),
    pytest.param(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "x", "lables": {}},
        },
        "'lables' was unexpected",
        id="a misspelt metadata field",
    ),
    pytest.param(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "x"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "f",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "8", "borrowingLimit": "1"}
                                ],
                            }
                        ],
                    }
                ]
            },
        },
        "borrowingLimit must be nil when cohort is empty",
        id="a CEL rule",
    ),
    pytest.param(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "x"},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [
                            {"name": "f", "resources": [{"name": "cpu", "nominalQuota": "8 cpus"}]}
                        ],
                    }
                ]
            },
        },
        "does not match",
        id="a malformed quantity",
    ),
    pytest.param(
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Cohort", "metadata": {"name": "x"}},
        "no schema",
        id="an API version not exported",
    ),
]


@pytest.mark.parametrize(("obj", "message"), BAD_OBJECTS)
def test_the_validator_finds_what_the_api_server_would_refuse(
    obj: dict[str, Any], message: str
) -> None:
    assert message in "\n".join(problems(obj))


def test_output_is_deterministic_whatever_the_order_of_the_configuration() -> None:
    config = config_of()
    reordered = merge(BASE, {})
    reordered["teams"] = dict(reversed(list(reordered["teams"].items())))
    first = {name: to_yaml(objs) for name, objs in render(config).items()}
    again = {
        name: to_yaml(objs)
        for name, objs in render(ClusterConfig.model_validate(reordered)).items()
    }
    assert first == again
    assert list(first) == sorted(first)  # file names sort in the order to apply them


# --- what the objects say -----------------------------------------------------------------


@dataclass(frozen=True)
class QuotaCase:
    change: dict[str, Any]
    team: str
    flavor: str
    want: dict[str, dict[str, Any]]  # resource -> its quota entry without the name


QUOTA_CASES = [
    pytest.param(
        QuotaCase(
            {},
            "team-a",
            "h100",
            {
                "cpu": {"nominalQuota": "48"},
                "memory": {"nominalQuota": "512G"},
                "nvidia.com/gpu": {"nominalQuota": 4},
            },
        ),
        id="nominal GPUs bring their share of CPUs and memory",
    ),
    pytest.param(
        QuotaCase(
            {},
            "team-b",
            "h100",
            {
                "cpu": {"nominalQuota": "0"},
                "memory": {"nominalQuota": "0G"},
                "nvidia.com/gpu": {"nominalQuota": 0},
            },
        ),
        id="no quota of a type: nominal 0, may still borrow",
    ),
    pytest.param(
        QuotaCase(
            {
                "teams": {
                    "team-a": {
                        "quota": {"h100": {"nominal": 4, "borrowing_limit": 2, "lending_limit": 1}}
                    }
                }
            },
            "team-a",
            "h100",
            {
                "cpu": {"nominalQuota": "48", "borrowingLimit": "24", "lendingLimit": "12"},
                "memory": {
                    "nominalQuota": "512G",
                    "borrowingLimit": "256G",
                    "lendingLimit": "128G",
                },
                "nvidia.com/gpu": {"nominalQuota": 4, "borrowingLimit": 2, "lendingLimit": 1},
            },
        ),
        id="limits scale to CPUs and memory",
    ),
    pytest.param(
        QuotaCase(
            {
                "teams": {
                    "team-a": {"quota": {"h100": {"nominal": 1, "cpus": 30, "memory_gb": 200.5}}}
                }
            },
            "team-a",
            "h100",
            {
                "cpu": {"nominalQuota": "30"},
                "memory": {"nominalQuota": "200500M"},
                "nvidia.com/gpu": {"nominalQuota": 1},
            },
        ),
        id="a GPU-less cap above the GPU share wins",
    ),
    pytest.param(
        QuotaCase(
            {"teams": {"solo": {"quota": {"t4": {"nominal": 1}}}}},
            "solo",
            "t4",
            {
                "cpu": {"nominalQuota": "4"},
                "memory": {"nominalQuota": "16G"},
                "nvidia.com/gpu": {"nominalQuota": 1},
            },
        ),
        id="no cohort: no limits at all",
    ),
]


@pytest.mark.parametrize("case", QUOTA_CASES)
def test_cluster_queue_quotas(case: QuotaCase) -> None:
    queue = find(config_of(case.change), "ClusterQueue", case.team)
    (group,) = queue["spec"]["resourceGroups"]
    flavor = next(f for f in group["flavors"] if f["name"] == case.flavor)
    assert {r.pop("name"): r for r in copy.deepcopy(flavor["resources"])} == case.want


def test_cluster_queue_policy_fields() -> None:
    config = config_of(
        {
            "teams": {"solo": {"weight": 0.5}},
            "scheduler": {"queueing": "strict_fifo", "preemption": {"within_team": "never"}},
        }
    )
    solo = find(config, "ClusterQueue", "solo")["spec"]
    assert "cohortName" not in solo
    assert solo["namespaceSelector"] == {"matchLabels": {"gpupool.io/team": "solo"}}
    assert solo["queueingStrategy"] == "StrictFIFO"
    assert solo["fairSharing"] == {"weight": "0.5"}
    assert solo["preemption"]["withinClusterQueue"] == "Never"
    assert find(config, "ClusterQueue", "team-a")["spec"]["cohortName"] == "research"
    assert find(config, "LocalQueue", "default", "solo")["spec"] == {"clusterQueue": "solo"}


def test_role_bindings_follow_groups_members_and_platform_admins() -> None:
    config = config_of(
        {
            "platform_admin_groups": ["Ops"],
            "users": {"boss": {"uid": 10, "gid": 10, "platform_admin": True}},
            "teams": {"team-a": {"members": {"alice": "viewer", "bob": "admin"}}},
        }
    )
    settings = ExportSettings(user_prefix="oidc:", group_prefix="oidc:")
    subjects = {
        obj["metadata"]["name"]: [(s["kind"], s["name"]) for s in obj["subjects"]]
        for obj in objects(config, settings)
        if obj["kind"] == "RoleBinding" and obj["metadata"]["namespace"] == "team-a"
    }
    assert subjects == {
        "gpupool-admin": [("Group", "oidc:Ops"), ("User", "oidc:boss"), ("User", "oidc:bob")],
        "gpupool-member": [("Group", "oidc:TeamA")],
        "gpupool-viewer": [("User", "oidc:alice")],
        "gpupool-controller": [("ServiceAccount", "gpupool")],
    }


def test_no_role_may_exec_into_pods_and_viewers_change_nothing() -> None:
    roles = [obj for obj in objects(config_of()) if obj["kind"] == "Role"]
    resources = {r for role in roles for rule in role["rules"] for r in rule["resources"]}
    assert not resources & {"pods/exec", "pods/attach", "pods/portforward"}
    viewer = next(r for r in roles if r["metadata"]["name"] == "gpupool-viewer")
    assert {v for rule in viewer["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}


def test_the_controller_may_run_jobs_in_team_namespaces_and_only_read_elsewhere() -> None:
    settings = ExportSettings(controller_account="platform/runner")
    found = [
        o for o in objects(config_of(), settings) if o["metadata"]["name"] == "gpupool-controller"
    ]
    scopes = {(o["kind"], o["metadata"].get("namespace")) for o in found}
    assert scopes == {
        ("Role", "team-a"), ("Role", "team-b"), ("RoleBinding", "team-a"),
        ("RoleBinding", "team-b"), ("ClusterRole", None), ("ClusterRoleBinding", None),
    }  # fmt: skip
    for obj in found:
        if "subjects" in obj:
            assert obj["subjects"] == [
                {"kind": "ServiceAccount", "name": "runner", "namespace": "platform"}
            ]
    cluster_role = next(o for o in found if o["kind"] == "ClusterRole")
    assert {v for rule in cluster_role["rules"] for v in rule["verbs"]} == {"get", "list", "watch"}
    none = ExportSettings(controller_account=None)
    assert not [o for o in objects(config_of(), none) if "gpupool-controller" in str(o)]
    with pytest.raises(ExportError, match="the controller's service account: 'runner' is not"):
        render(config_of(), ExportSettings(controller_account="runner"))


def test_network_policies_deny_ingress_but_from_the_namespace_and_the_platform() -> None:
    settings = ExportSettings(allow_from_namespaces=("monitoring", "gpupool-system"))
    policies = {
        obj["metadata"]["name"]: obj["spec"]
        for obj in objects(config_of(), settings)
        if obj["kind"] == "NetworkPolicy" and obj["metadata"]["namespace"] == "team-b"
    }
    assert policies["default-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    assert policies["allow-same-namespace"]["ingress"] == [{"from": [{"podSelector": {}}]}]
    sources = policies["allow-from-platform"]["ingress"][0]["from"]
    assert [s["namespaceSelector"]["matchLabels"] for s in sources] == [
        {"kubernetes.io/metadata.name": "gpupool-system"},
        {"kubernetes.io/metadata.name": "monitoring"},
    ]
    none = ExportSettings(allow_from_namespaces=())
    assert not any(
        o["metadata"]["name"] == "allow-from-platform" for o in objects(config_of(), none)
    )


def test_namespaces_carry_team_and_cohort() -> None:
    config = config_of({"teams": {"solo": {}}})
    assert find(config, "Namespace", "team-a")["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "gpupool",
        "gpupool.io/cohort": "research",
        "gpupool.io/team": "team-a",
        "pod-security.kubernetes.io/enforce": "baseline",
    }
    assert "gpupool.io/cohort" not in find(config, "Namespace", "solo")["metadata"]["labels"]
    unlabelled = ExportSettings(pod_security=None)
    assert all(
        "pod-security.kubernetes.io/enforce" not in o["metadata"]["labels"]
        for o in objects(config, unlabelled)
        if o["kind"] == "Namespace"
    )


def test_flavors_select_nodes() -> None:
    pools = [
        kubernetes_pool(
            "spot",
            "h100",
            node_labels={"gpu": "h100", "spot": "true"},
            node_taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
        ),
        kubernetes_pool(
            "dedicated",
            "h100",
            node_labels={"gpu": "h100"},
            node_taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
        ),
    ]
    config = config_of({"pools": pools})
    assert find(config, "ResourceFlavor", "h100")["spec"] == {
        "nodeLabels": {"gpu": "h100"},
        "nodeTaints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    assert find(config, "ResourceFlavor", "t4")["spec"] == {
        "nodeLabels": {"gpupool.io/gpu-type": "t4"}
    }


def test_webhook_configuration() -> None:
    settings = ExportSettings(
        webhook_namespace="platform", webhook_service="hook", webhook_ca_bundle=b"PEM"
    )
    (hook,) = find(config_of(), "MutatingWebhookConfiguration", "gpupool-posix-identity")[
        "webhooks"
    ]
    assert "caBundle" not in hook["clientConfig"]
    (hook,) = next(
        o for o in objects(config_of(), settings) if o["kind"] == "MutatingWebhookConfiguration"
    )["webhooks"]
    assert hook["clientConfig"] == {
        "service": {"namespace": "platform", "name": "hook", "path": "/mutate", "port": 443},
        "caBundle": "UEVN",
    }
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert {r for rule in hook["rules"] for r in rule["resources"]} == {"pods", "jobs", "cronjobs"}


def test_priority_classes_by_value() -> None:
    config = config_of(
        {"priority_classes": {"low": {"value": 0, "default": True}, "high": {"value": 100}}}
    )
    classes = [o for o in objects(config) if o["kind"] == "WorkloadPriorityClass"]
    assert [(o["metadata"]["name"], o["value"]) for o in classes] == [("high", 100), ("low", 0)]
    assert classes[1]["description"].endswith("(the default)")


REFUSALS = [
    pytest.param(
        {"teams": {"default": {}}},
        "teams.default: its namespace would be 'default'",
        id="a team named like a system namespace",
    ),
    pytest.param({"teams": {"kube-ops": {}}}, "teams.kube-ops", id="a kube- team"),
    pytest.param(
        {
            "pools": [
                kubernetes_pool("a", "h100", node_labels={"x": "1"}),
                kubernetes_pool("b", "h100", node_labels={"x": "2"}),
            ]
        },
        "pools[1].options.node_labels: the kubernetes pools of gpu type 'h100' share no",
        id="pools of a type share no label",
    ),
    pytest.param(
        {
            "pools": [
                kubernetes_pool("a", "h100", node_taints=[{"key": "k", "effect": "NoSchedule"}]),
                kubernetes_pool("b", "h100"),
            ]
        },
        "pools[1].options.node_taints: differ from those of pool 'a'",
        id="pools of a type with different taints",
    ),
    pytest.param(
        {"pools": [kubernetes_pool("a", "h100", node_taints=[{"key": "k", "effect": "Never"}])]},
        "pools[0].options.node_taints[0].effect: expected one of NoSchedule",
        id="a bad taint effect",
    ),
    pytest.param(
        {"pools": [kubernetes_pool("a", "h100", node_labels=["gpu=h100"])]},
        "pools[0].options.node_labels: expected a mapping",
        id="labels not a mapping",
    ),
    pytest.param(
        {"priority_classes": {"urgent": {"value": 2**31}}},
        "priority_classes.urgent.value: 2147483648 does not fit",
        id="a priority beyond 32 bits",
    ),
    pytest.param(
        {
            "cohorts": {
                "research": {
                    "preemption": {
                        "reclaim": "never",
                        "borrow_within_cohort": {"policy": "lower_priority"},
                    }
                }
            }
        },
        "cohorts.research.preemption: Kueue does not allow",
        id="borrowing preemption without reclaim",
    ),
]


@pytest.mark.parametrize(("change", "message"), REFUSALS)
def test_what_cannot_be_exported_is_refused_with_the_field(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ExportError) as caught:
        render(config_of(change))
    assert message in str(caught.value)


def test_yaml_round_trips() -> None:
    for name, objs in render(config_of()).items():
        assert list(yaml.safe_load_all(to_yaml(objs))) == objs, name


def test_the_manifests_in_the_documentation_are_valid() -> None:
    page = (ROOT / "docs" / "kubernetes.md").read_text(encoding="utf-8")
    blocks = page.split("```yaml\n")[1:]
    assert blocks, "docs/kubernetes.md shows no manifest"
    docs = [d for block in blocks for d in yaml.safe_load_all(block.split("```")[0]) if d]
    assert {d["kind"] for d in docs} >= {"Deployment", "Service"}
    assert {f"{d['kind']}: {p}" for d in docs for p in problems(d)} == set()
