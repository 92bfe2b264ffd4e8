"""The ``options:`` of a Kubernetes pool: accepted forms, and a clear refusal naming the option
and the fix for each mistake (also what ``gpupool config validate`` reports)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gpupool.backends.errors import BackendMisconfigured
from gpupool.backends.kubernetes.options import KubernetesOptions, Taint
from gpupool.backends.options import check_options


def test_defaults() -> None:
    options = KubernetesOptions.parse({}, "h100")
    assert options.node_labels == {"gpupool.io/gpu-type": "h100"}
    assert options.namespace_for("team-a", "p") == "team-a"
    assert (options.gpu_resource, options.stop_grace_s, options.in_cluster) == (
        "nvidia.com/gpu",
        30,
        False,
    )


def test_taints_become_tolerations_in_a_stable_order() -> None:
    options = KubernetesOptions.parse(
        {
            "node_taints": [
                {"key": "z", "effect": "NoSchedule"},
                {"key": "a", "value": "x", "effect": "NoExecute"},
            ]
        }
    )
    assert options.node_taints == (Taint("a", "NoExecute", "x"), Taint("z", "NoSchedule"))
    assert [t.toleration() for t in options.node_taints] == [
        {"key": "a", "operator": "Equal", "value": "x", "effect": "NoExecute"},
        {"key": "z", "operator": "Exists", "effect": "NoSchedule"},
    ]


@dataclass(frozen=True)
class Bad:
    options: dict[str, Any]
    says: list[str] = field(default_factory=list)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            Bad({"namespce": "x"}, ["unknown kubernetes pool options: namespce", "known:"]),
            id="typo",
        ),
        pytest.param(
            Bad({"in_cluster": True, "kubeconfig": "/k"}, ["in_cluster", "excludes kubeconfig"]),
            id="in-cluster and a kubeconfig",
        ),
        pytest.param(
            Bad({"namespace": "GPU_{team}"}, ["namespace", "not a DNS label", "gpu-{team}"]),
            id="namespace not DNS",
        ),
        pytest.param(
            Bad({"namespace": "gpu-{user}"}, ["namespace", "gpu-{user}"]), id="unknown placeholder"
        ),
        pytest.param(
            Bad({"node_labels": ["gpu"]}, ["node_labels", "mapping", "e.g."]),
            id="labels not a mapping",
        ),
        pytest.param(
            Bad({"node_labels": {"bad key!": "x"}}, ["not a label key"]), id="bad label key"
        ),
        pytest.param(
            Bad({"node_labels": {"gpu": 80}}, ["node_labels.gpu", "quote numbers"]),
            id="label value a number",
        ),
        pytest.param(
            Bad(
                {"node_taints": [{"key": "gpu", "effect": "NoRun"}]},
                ["node_taints[0].effect", "NoSchedule"],
            ),
            id="bad taint effect",
        ),
        pytest.param(
            Bad({"node_taints": {"key": "gpu"}}, ["node_taints", "list"]), id="taints not a list"
        ),
        pytest.param(Bad({"stop_grace_s": -1}, ["stop_grace_s", "negative"]), id="negative grace"),
        pytest.param(
            Bad({"stop_grace_s": "30s"}, ["stop_grace_s", "whole seconds"]), id="grace with a unit"
        ),
        pytest.param(
            Bad({"request_timeout_s": 0}, ["request_timeout_s", "positive"]), id="zero timeout"
        ),
        pytest.param(
            Bad({"run_without_identity": "yes"}, ["run_without_identity", "true"]),
            id="a string for a switch",
        ),
        pytest.param(
            Bad({"workdir_root": "relative/dir"}, ["workdir_root", "absolute"]),
            id="relative work root",
        ),
        pytest.param(
            Bad({"workdir_claim": "My Claim"}, ["workdir_claim", "claim name"]), id="bad claim name"
        ),
        pytest.param(
            Bad({"job_name_prefix": "GP_"}, ["job_name_prefix", "lower-case"]), id="bad prefix"
        ),
        pytest.param(
            Bad({"gpu_resource": "nvidia gpu"}, ["gpu_resource", "nvidia.com/gpu"]),
            id="bad resource name",
        ),
        pytest.param(Bad({"image": ""}, ["image", "non-empty"]), id="empty image"),
    ],
)
def test_mistakes_are_refused_with_the_option_and_the_fix(case: Bad) -> None:
    with pytest.raises(BackendMisconfigured) as caught:
        KubernetesOptions.parse(case.options, "h100")
    for fragment in case.says:
        assert fragment in str(caught.value)


def test_config_validation_runs_the_same_parser() -> None:
    assert check_options("kubernetes", "p", "h100", {"namespace": "gpu-{team}"}).error is None
    found = check_options("kubernetes", "p", "h100", {"stop_grace_s": -5})
    assert found.error is not None and "stop_grace_s" in found.error
    assert check_options("kubernetes", "p", "h100", {"kubeconfg": "/k"}).unknown == ("kubeconfg",)
