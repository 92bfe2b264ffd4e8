"""The Kubernetes OpenAPI schemas the stand-in API server checks request bodies against.

The schemas are the JSON-schema form of Kubernetes' published OpenAPI definitions shipped by
the ``kubernetes-validate`` package (its ``kubernetes-json-schema/v<version>-local-strict``
files: ``additionalProperties: false`` everywhere, so a misspelt or misplaced field is an
error, as it is for an API server asked for strict field validation). :data:`VERSION` is the
Kubernetes release checked against. Validators are built once per schema file.
"""

from __future__ import annotations

import functools
from typing import Any

import jsonschema
import kubernetes_validate.utils as kv
from referencing import Registry, Resource

VERSION = "1.33"


@functools.cache
def _directory() -> str:
    version = [v for v in kv.all_versions() if kv.major_minor(v) <= VERSION][-1]
    return f"kubernetes-json-schema/v{version}-local-strict"


@functools.cache
def _validator(schema: str) -> jsonschema.protocols.Validator:
    contents = kv.schema_contents(f"{_directory()}/{schema}.json", VERSION)
    definitions = kv.schema_contents(f"{_directory()}/_definitions.json", VERSION)
    registry: Registry[Any] = Resource.from_contents(contents) @ Registry()
    registry = Resource.from_contents(definitions) @ registry
    return jsonschema.validators.Draft202012Validator(contents, registry=registry)


def _where(path: Any) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(the object)"


def problems(obj: Any, schema: str) -> list[str]:
    """What is wrong with ``obj`` as the schema ``schema`` (e.g. ``job-batch-v1``, file names
    of the package: kind, then API group and version), one line each, sorted."""
    found = _validator(schema).iter_errors(obj)
    return sorted(f"{_where(e.absolute_path)}: {e.message}" for e in found)
