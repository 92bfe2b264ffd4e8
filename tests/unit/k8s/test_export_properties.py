"""Properties of the export over generated configurations: every object is valid for
Kubernetes and Kueue (schemas and CEL rules), limits never exceed what Kueue's own validation
allows, and the output does not depend on the order of the configuration."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.k8s.export import render, to_yaml
from gpupool.spec.models import ClusterConfig
from support.k8s_schemas import problems

GPU_TYPES = ("h100", "t4", "cpu")
SUFFIX = {"m": 1e-3, "": 1.0, "M": 1e6, "G": 1e9}


def amount(quantity: str | int) -> float:
    """A Kubernetes quantity in the forms the export writes ("8", "8500m", "64G", "100500M")."""
    if isinstance(quantity, int):
        return float(quantity)
    unit = quantity[-1] if quantity[-1] in SUFFIX else ""
    return float(quantity[: len(quantity) - len(unit)]) * SUFFIX[unit]


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    cohorts = draw(st.lists(st.sampled_from(["research", "prod"]), unique=True, max_size=2))
    teams = {}
    for i in range(draw(st.integers(1, 4))):
        cohort = draw(st.sampled_from([None, *cohorts]))
        quota = {}
        for gpu_type in draw(st.lists(st.sampled_from(GPU_TYPES), unique=True, max_size=3)):
            if gpu_type == "cpu":
                quota[gpu_type] = {"cpus": draw(st.floats(0, 64).map(lambda x: round(x, 2)))}
                continue
            nominal = draw(st.integers(0, 16))
            entry: dict[str, Any] = {"nominal": nominal}
            if cohort is not None and draw(st.booleans()):
                entry["borrowing_limit"] = draw(st.integers(0, 8))
            if cohort is not None and draw(st.booleans()):
                entry["lending_limit"] = draw(st.integers(0, nominal))
            quota[gpu_type] = entry
        teams[f"team-{i}"] = {
            "cohort": cohort,
            "quota": quota,
            "weight": draw(st.sampled_from([0.5, 1, 2.5])),
            "groups": draw(st.lists(st.sampled_from(["A", "B", "Ops"]), unique=True)),
        }
    nodes, cpus, memory = st.integers(1, 9), st.integers(8, 128), st.floats(16, 2048)
    return {
        "gpu_types": {t: {} for t in GPU_TYPES},
        "pools": [
            {"name": "h100s", "backend": "local", "gpu_type": "h100", "nodes": draw(nodes),
             "node": {"gpus": 8, "cpus": draw(cpus), "memory_gb": draw(memory)}},
            {"name": "t4s", "backend": "local", "gpu_type": "t4",
             "node": {"gpus": 4, "cpus": 24, "memory_gb": 96.5}},
            {"name": "cpus", "backend": "local", "gpu_type": "cpu",
             "node": {"gpus": 0, "cpus": 64, "memory_gb": 256}},
        ],
        "cohorts": {c: {} for c in cohorts},
        "teams": teams,
        "priority_classes": {"low": {"value": 0, "default": True}, "high": {"value": 1000}},
    }  # fmt: skip


@settings(max_examples=15, deadline=None)
@given(configs())
def test_every_generated_configuration_exports_valid_objects(raw: dict[str, Any]) -> None:
    config = ClusterConfig.model_validate(raw)
    files = render(config)
    bad = {
        f"{o['kind']}/{o['metadata']['name']}": p
        for objs in files.values()
        for o in objs
        if (p := problems(o))
    }
    assert bad == {}
    for queue in files["32-clusterqueues.yaml"]:
        for flavor in queue["spec"]["resourceGroups"][0]["flavors"]:
            for resource in flavor["resources"]:
                if "lendingLimit" in resource:  # Kueue's webhook: lending at most nominal
                    assert amount(resource["lendingLimit"]) <= amount(resource["nominalQuota"])
    reordered = dict(raw, teams=dict(reversed(list(raw["teams"].items()))))
    again = render(ClusterConfig.model_validate(reordered))
    assert {n: to_yaml(o) for n, o in files.items()} == {n: to_yaml(o) for n, o in again.items()}
