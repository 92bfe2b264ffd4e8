"""Regenerate the JSON schemas in this folder from the published definitions.

    python tests/unit/k8s/schemas/extract.py KUEUE_CRD_DIR K8S_SWAGGER_JSON

KUEUE_CRD_DIR is ``config/components/crd/bases`` of a Kueue checkout at the tag named in
README.md here; K8S_SWAGGER_JSON is a Kubernetes OpenAPI v2 document (``swagger.json``). Only
the kinds the exporter, the webhook tests and the documentation's examples use are kept, each
with the definitions it reaches, so the files stay small; descriptions are dropped for the same
reason.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
KUEUE_VERSION = "v1beta2"  # the served storage version of Kueue's API at the tag in README.md
KUEUE_CRDS = (
    "clusterqueues",
    "cohorts",
    "localqueues",
    "resourceflavors",
    "workloadpriorityclasses",
)
K8S_ROOTS = (
    "io.k8s.api.core.v1.Namespace",
    "io.k8s.api.core.v1.Pod",
    "io.k8s.api.rbac.v1.Role",
    "io.k8s.api.rbac.v1.RoleBinding",
    "io.k8s.api.rbac.v1.ClusterRole",
    "io.k8s.api.rbac.v1.ClusterRoleBinding",
    "io.k8s.api.networking.v1.NetworkPolicy",
    "io.k8s.api.batch.v1.Job",
    "io.k8s.api.batch.v1.CronJob",
    "io.k8s.api.admissionregistration.v1.MutatingWebhookConfiguration",
    # what docs/kubernetes.md deploys the webhook with
    "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.core.v1.Service",
    "io.k8s.api.core.v1.ConfigMap",
)


def strip(node: Any) -> Any:
    """The schema without its descriptions (a field named ``description`` stays)."""
    if isinstance(node, dict):
        return {
            k: ({name: strip(s) for name, s in v.items()} if k == "properties" else strip(v))
            for k, v in node.items()
            if k != "description" or not isinstance(v, str)
        }
    if isinstance(node, list):
        return [strip(v) for v in node]
    return node


def refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"].rsplit("/", 1)[1]} if "$ref" in node else set()
        for value in node.values():
            found |= refs(value)
        return found
    if isinstance(node, list):
        return set().union(*(refs(v) for v in node)) if node else set()
    return set()


def kueue(crd_dir: Path) -> None:
    for name in KUEUE_CRDS:
        crd = yaml.safe_load((crd_dir / f"kueue.x-k8s.io_{name}.yaml").read_text())
        version = next(v for v in crd["spec"]["versions"] if v["name"] == KUEUE_VERSION)
        out = {
            "group": crd["spec"]["group"],
            "version": KUEUE_VERSION,
            "kind": crd["spec"]["names"]["kind"],
            "scope": crd["spec"]["scope"],
            "openAPIV3Schema": strip(version["schema"]["openAPIV3Schema"]),
        }
        target = HERE / "kueue" / f"{name}.json"
        target.parent.mkdir(exist_ok=True)
        target.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


def kubernetes(swagger_path: Path) -> None:
    definitions = json.loads(swagger_path.read_text())["definitions"]
    keep: dict[str, Any] = {}
    todo = list(K8S_ROOTS)
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep[name] = strip(definitions[name])
        todo.extend(sorted(refs(definitions[name])))
    target = HERE / "kubernetes" / "definitions.json"
    target.parent.mkdir(exist_ok=True)
    target.write_text(json.dumps({"definitions": keep}, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    kueue(Path(sys.argv[1]))
    kubernetes(Path(sys.argv[2]))
