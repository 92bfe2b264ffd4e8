"""``gpupool submit -f job.yaml``: a job written down as the API's submit body.

The file holds the same fields as ``POST /v1/jobs`` (``name``, ``team``, ``command``,
``resources: {gpus, gpu_types, nodes, cpus, memory_gb}``, ``priority_class``, ``kind``,
``backend``, ``env``, ``inputs``, ``outputs``, ``max_runtime_s``, ``image``,
``image_pull_secret``, ``container: {mounts, shm_size_gb, read_only_root}``, ...), plus
``array`` for a job array. Flags given on the command line override the file's fields; the
rest of the checking is the server's, whose 422 names any field it refuses.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
import yaml

# command-line flag -> the body field it sets (resources.* live under "resources")
FLAG_FIELDS = {
    "team": "team",
    "name": "name",
    "priority": "priority_class",
    "kind": "kind",
    "backend": "backend",
    "max_runtime": "max_runtime_s",
    "checkpoint_interval": "checkpoint_interval_s",
    "array": "array",
    "input_": "inputs",
    "output_": "outputs",
    "image": "image",
    "image_pull_secret": "image_pull_secret",
}
RESOURCE_FLAGS = {
    "gpus": "gpus",
    "gpu_type": "gpu_types",
    "nodes": "nodes",
    "cpus": "cpus",
    "memory_gb": "memory_gb",
}


def load_spec(path: Path) -> dict[str, Any]:
    """The file's mapping (YAML or JSON); a usage error naming the file otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
        loaded = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc}", param_hint="--file") from None
    if not isinstance(loaded, dict):
        raise typer.BadParameter(
            f"{path} must hold a mapping of submit fields (name, command, resources, ...)",
            param_hint="--file",
        )
    return loaded


def with_flags(spec: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with the fields of the flags in ``given`` (flag name -> value) replaced;
    ``env`` entries are merged into the file's."""
    body = dict(spec)
    for flag, value in given.items():
        if flag in FLAG_FIELDS:
            body[FLAG_FIELDS[flag]] = value
        elif flag in RESOURCE_FLAGS:
            resources = dict(body.get("resources") or {})
            resources[RESOURCE_FLAGS[flag]] = value
            body["resources"] = resources
        elif flag == "env":
            body["env"] = {**(body.get("env") or {}), **value}
        elif flag == "command":
            body["command"] = value
    return body
