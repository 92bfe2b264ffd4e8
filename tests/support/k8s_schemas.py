"""Validate Kubernetes objects against the API's published schemas, strictly.

The schemas are the ones committed under ``tests/unit/k8s/schemas`` (see its README.md for their
source, version and licence): the Kubernetes OpenAPI definitions of the built-in kinds and the
``openAPIV3Schema`` of Kueue's CRDs. Validation is stricter than the schemas alone, like
``kubectl apply --validate=strict``: a field the schema does not name is an error (the API
server would drop it from a custom resource, or refuse it), and a custom resource's metadata is
checked as the ObjectMeta it is. The CRDs' CEL rules (``x-kubernetes-validations``) are
evaluated with ``cel-python``, except transition rules (those that read ``oldSelf``), which
need an earlier version of the object.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import celpy
from jsonschema import Draft4Validator

SCHEMAS = Path(__file__).resolve().parents[1] / "unit" / "k8s" / "schemas"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
# cel-python's parser raises the interpreter's recursion limit the first time it runs; doing that
# here, at import, keeps it from happening inside a test (Hypothesis warns about it).
celpy.Environment().compile("true")
# RFC 1123 subdomain: the rule for the name of most objects.
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


def _strict(node: Any) -> Any:
    """Forbid unknown fields wherever an object lists its fields."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


@cache
def _definitions() -> dict[str, Any]:
    defs = json.loads((SCHEMAS / "kubernetes" / "definitions.json").read_text())["definitions"]
    defs = _strict(defs)
    # Swagger 2 cannot say "integer or string"; the API server accepts both.
    defs["io.k8s.apimachinery.pkg.util.intstr.IntOrString"] = {"type": ["integer", "string"]}
    return defs


@cache
def _kinds() -> dict[tuple[str, str], dict[str, Any]]:
    """``(apiVersion, kind)`` -> a schema for it, with every definition it may reference."""
    defs = _definitions()
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for name, schema in defs.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            api = f"{gvk['group']}/{gvk['version']}" if gvk["group"] else gvk["version"]
            found[(api, gvk["kind"])] = {"$ref": f"#/definitions/{name}", "definitions": defs}
    for path in sorted((SCHEMAS / "kueue").glob("*.json")):
        crd = json.loads(path.read_text())
        schema = _strict(copy.deepcopy(crd["openAPIV3Schema"]))
        schema["properties"]["metadata"] = {"$ref": f"#/definitions/{OBJECT_META}"}
        schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
        schema["definitions"] = defs
        found[(f"{crd['group']}/{crd['version']}", crd["kind"])] = schema
    return found


@cache
def _validator(key: tuple[str, str]) -> Draft4Validator:
    return Draft4Validator(_kinds()[key])


def known_kinds() -> set[tuple[str, str]]:
    return set(_kinds())


def problems(obj: dict[str, Any]) -> list[str]:
    """What is wrong with ``obj``, one line per problem; empty when it is valid."""
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    schema = _kinds().get(key)
    if schema is None:
        return [f"no schema for apiVersion {key[0]!r} kind {key[1]!r}"]
    validator = _validator(key)
    found = [
        f"{'/'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in sorted(validator.iter_errors(obj), key=lambda e: list(e.absolute_path))
    ]
    found += _cel_problems(schema, obj, "")
    meta = obj.get("metadata", {})
    # An object sent with generateName gets its name when it is stored.
    name = meta.get("name", "") if "generateName" not in meta else meta["generateName"] + "x"
    if not re.match(DNS_SUBDOMAIN, name) or len(name) > 253:
        found.append(f"metadata/name: {name!r} is not a DNS subdomain")
    return found


@cache
def _program(rule: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _cel_problems(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    """Evaluate the CEL rules of ``schema`` and of the schemas below it on ``value``."""
    found = []
    for check in schema.get("x-kubernetes-validations", []):
        if "oldSelf" in check["rule"]:
            continue
        verdict = _program(check["rule"]).evaluate({"self": celpy.json_to_cel(value)})
        if verdict is not True and verdict != celpy.celtypes.BoolType(True):
            found.append(f"{path or '<root>'}: {check.get('message') or check['rule']}")
    if isinstance(value, dict):
        for key, item in value.items():
            sub = schema.get("properties", {}).get(key)
            if sub is None and isinstance(schema.get("additionalProperties"), dict):
                sub = schema["additionalProperties"]
            if sub is not None:
                found += _cel_problems(sub, item, f"{path}/{key}" if path else key)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            found += _cel_problems(schema["items"], item, f"{path}/{i}")
    return found
