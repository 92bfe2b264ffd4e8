"""An attempt as a Batch task: its id and its create body. Pure: no SDK, no I/O.

Invariants:

* **The id is the key.** ``task_id`` maps an attempt key ``<job>.<attempt>`` to a Batch task
  id (letters, digits, ``-``, ``_``; at most 64), injectively: ``<job>-a<attempt>`` when the
  job id fits (the attempt is read back from the last ``-a<digits>``), else ``h`` and a hash
  of the key. The key itself is the task's ``displayName``, so a task found under that id is
  checked to be gpupool's own before it is adopted.
* **The contract holds on the node.** Batch sets no variable from another, so the command line
  is a small ``/bin/sh`` wrapper that derives ``GPUPOOL_JOB_WORKDIR``, ``GPUPOOL_INPUTS`` and
  ``GPUPOOL_OUTPUTS`` from ``AZ_BATCH_TASK_WORKING_DIR``, makes them, ``cd``s into the work
  dir and ``exec``s the command with stderr joined to stdout (so ``stdout.txt`` is the
  attempt's one log, in order, and the termination signal reaches the command itself).
* **Data moves through the grant.** Each declared input is a resource file (the grant's read
  URL) downloaded to ``$GPUPOOL_INPUTS/<input>``; with an Azure grant, the files under
  ``$GPUPOOL_OUTPUTS/<output>/`` are uploaded when the task completes to the output's
  per-attempt prefix through the grant's create-only container SAS. Grant URLs are secrets:
  they live in the body sent to Batch only, never in a log line or a handle.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from gpupool.backends.base import JobSpec, contract_env

_PLAIN_JOB = re.compile(r"[A-Za-z0-9_-]+\Z")
_MAX_ID = 64
WORK, INPUTS, OUTPUTS = "work", "inputs", "outputs"
# Set by the wrapper on the node; the user's env cannot override them.
DERIVED_ENV = ("GPUPOOL_JOB_WORKDIR", "GPUPOOL_INPUTS", "GPUPOOL_OUTPUTS")
RESERVED_ENV = frozenset({*DERIVED_ENV, "CUDA_VISIBLE_DEVICES"})

WRAPPER = (
    'w="$AZ_BATCH_TASK_WORKING_DIR"; '
    f'export GPUPOOL_JOB_WORKDIR="$w/{WORK}" GPUPOOL_INPUTS="$w/{INPUTS}" '
    f'GPUPOOL_OUTPUTS="$w/{OUTPUTS}"; '
    'mkdir -p "$GPUPOOL_JOB_WORKDIR" "$GPUPOOL_INPUTS" "$GPUPOOL_OUTPUTS" && '
    'cd "$GPUPOOL_JOB_WORKDIR" && exec {command} 2>&1'
)


def task_id(key: str, prefix: str = "") -> str:
    """The Batch task id of attempt ``key`` (see the module docstring)."""
    job, _, attempt = key.rpartition(".")
    plain = f"{prefix}{job}-a{attempt}"
    if job and attempt.isdigit() and _PLAIN_JOB.match(job) and len(plain) <= _MAX_ID:
        return plain
    return f"{prefix}h{hashlib.sha256(key.encode()).hexdigest()[:40]}"


def command_line(command: tuple[str, ...]) -> str:
    return "/bin/sh -c " + shlex.quote(WRAPPER.format(command=shlex.join(command)))


def duration(seconds: int) -> str:
    """ISO 8601, as Batch takes time spans."""
    return f"PT{seconds}S"


def task_body(spec: JobSpec, *, prefix: str = "") -> dict[str, Any]:
    """The JSON body of ``POST /jobs/{job}/tasks`` for ``spec``."""
    user_env = {k: v for k, v in spec.env.items() if k not in RESERVED_ENV}
    env = contract_env(replace(spec, env=user_env), "", "", "")
    for name in DERIVED_ENV:
        env.pop(name)
    devices = spec.devices[0] if spec.devices else tuple(range(spec.gpus_per_node))
    env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices)) if spec.gpus_per_node else ""
    body: dict[str, Any] = {
        "id": task_id(spec.key, prefix),
        "displayName": spec.key,
        "commandLine": command_line(spec.command),
        "environmentSettings": [{"name": k, "value": v} for k, v in sorted(env.items())],
        "constraints": {"maxTaskRetryCount": 0},
        "userIdentity": {"autoUser": {"scope": "task", "elevationLevel": "nonadmin"}},
    }
    if spec.max_runtime_s is not None:
        body["constraints"]["maxWallClockTime"] = duration(spec.max_runtime_s)
    if spec.image:
        body["containerSettings"] = {
            "imageName": spec.image,
            "workingDirectory": "taskWorkingDirectory",
        }
    if spec.grant is not None:
        body.update(_data(spec))
    return body


def _data(spec: JobSpec) -> dict[str, Any]:
    grant = spec.grant
    assert grant is not None
    out: dict[str, Any] = {}
    inputs = sorted(grant.inputs.items())
    files = [{"httpUrl": url, "filePath": f"{INPUTS}/{path}"} for path, url in inputs]
    if files:
        out["resourceFiles"] = files
    if grant.kind == "azure":
        uploads = [
            _upload(output, prefix, grant.outputs[output].url)
            for output, prefix in zip(spec.outputs, grant.scope.writes, strict=True)
            if output in grant.outputs
        ]
        if uploads:
            out["outputFiles"] = uploads
    return out


def _upload(output: str, prefix: str, url: str) -> dict[str, Any]:
    """An ``outputFiles`` entry: the grant's URL is ``<container>/<prefix>?<sas>``; Batch
    wants the container URL (with the SAS) and the blob path apart."""
    container, path = split_container_url(url, prefix)
    return {
        "filePattern": f"{OUTPUTS}/{output}/**/*",
        "destination": {"container": {"containerUrl": container, "path": path}},
        "uploadOptions": {"uploadCondition": "taskcompletion"},
    }


def split_container_url(url: str, prefix: str) -> tuple[str, str]:
    parts = urlsplit(url)
    tail = "/" + quote(prefix)
    if not parts.path.endswith(tail):
        raise ValueError("the output URL does not end with its prefix")
    container = parts.path[: -len(tail)]
    return urlunsplit(parts._replace(path=container)), prefix


def env_of(body: Mapping[str, Any]) -> dict[str, str]:
    """The environment settings of a task body, as a mapping (tests, the stand-in)."""
    return {e["name"]: e.get("value", "") for e in body.get("environmentSettings", [])}
