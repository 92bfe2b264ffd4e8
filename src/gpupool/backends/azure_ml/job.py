"""An attempt as an Azure ML command job: its name and what it is made of. Pure: no SDK,
no I/O; the adapter turns a :class:`JobPlan` into the SDK's ``command()``.

Invariants:

* **The name is the key.** The job name is :func:`gpupool.backends.azure_batch.task.task_id`
  of the attempt key (the same injective mapping as Batch task ids), after the pool's
  ``job_name_prefix``; the key itself is the tag ``gpupool_key``, checked before a job found
  under that name is adopted.
* **The contract holds on the compute.** The command is a ``/bin/sh``-compatible wrapper run
  by Azure ML in the job's working directory: it derives ``GPUPOOL_JOB_WORKDIR``,
  ``GPUPOOL_INPUTS`` and ``GPUPOOL_OUTPUTS`` from ``$PWD``, links each declared input (an
  Azure ML input downloaded from the grant's read URL) to ``$GPUPOOL_INPUTS/<input>`` and, with
  an ``output_datastore``, each declared output (an Azure ML output uploaded to
  ``<output>/attempt-<n>/`` of the team's datastore) to ``$GPUPOOL_OUTPUTS/<output>``, then
  ``exec``s the command with stderr joined to stdout (one log, in order).
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gpupool.backends.azure_batch.task import DERIVED_ENV, RESERVED_ENV, task_id
from gpupool.backends.base import JobSpec, contract_env

KEY_TAG = "gpupool_key"
POOL_TAG = "gpupool_pool"


@dataclass(frozen=True)
class JobPlan:
    name: str
    display_name: str
    command: str
    environment_variables: Mapping[str, str]
    tags: Mapping[str, str]
    inputs: Mapping[str, str] = field(default_factory=dict)  # AML input name -> URL
    outputs: Mapping[str, str] = field(default_factory=dict)  # AML output name -> azureml:// URI
    timeout_s: int | None = None


def job_name(key: str, prefix: str = "") -> str:
    return task_id(key, prefix)


def plan(spec: JobSpec, *, prefix: str = "", output_datastore: str | None = None) -> JobPlan:
    user_env = {k: v for k, v in spec.env.items() if k not in RESERVED_ENV}
    env = contract_env(replace(spec, env=user_env), "", "", "")
    for name in DERIVED_ENV:
        env.pop(name)
    devices = spec.devices[0] if spec.devices else tuple(range(spec.gpus_per_node))
    env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices)) if spec.gpus_per_node else ""
    links: list[tuple[str, str]] = []  # (${{...}} reference, path under the work area)
    inputs: dict[str, str] = {}
    outputs: dict[str, str] = {}
    grant = spec.grant
    if grant is not None:
        for i, (path, url) in enumerate(sorted(grant.inputs.items())):
            inputs[f"input_{i}"] = url
            links.append((f"${{{{inputs.input_{i}}}}}", f"inputs/{path}"))
    if output_datastore and spec.grant is not None:
        datastore = output_datastore.replace("{team}", spec.team.replace("-", "_"))
        for i, (output, prefix_path) in enumerate(
            zip(spec.outputs, spec.grant.scope.writes, strict=True)
        ):
            outputs[f"output_{i}"] = f"azureml://datastores/{datastore}/paths/{prefix_path}"
            links.append((f"${{{{outputs.output_{i}}}}}", f"outputs/{output}"))
    return JobPlan(
        name=job_name(spec.key, prefix),
        display_name=spec.key,
        command=wrapper(spec.command, links),
        environment_variables=dict(sorted(env.items())),
        tags={KEY_TAG: spec.key, POOL_TAG: spec.pool, "gpupool_team": spec.team},
        inputs=inputs,
        outputs=outputs,
        timeout_s=spec.max_runtime_s,
    )


def wrapper(command: tuple[str, ...], links: list[tuple[str, str]]) -> str:
    steps = [
        'w="$PWD"',
        'export GPUPOOL_JOB_WORKDIR="$w/work" GPUPOOL_INPUTS="$w/inputs" '
        'GPUPOOL_OUTPUTS="$w/outputs"',
        'mkdir -p "$GPUPOOL_JOB_WORKDIR" "$GPUPOOL_INPUTS" "$GPUPOOL_OUTPUTS"',
    ]
    for reference, path in links:
        parent = posixpath.dirname(path)
        where = f'"$w"/{shlex.quote(path)}'
        steps.append(f'mkdir -p "$w"/{shlex.quote(parent)} && ln -sfn "{reference}" {where}')
    steps.append(f'cd "$GPUPOOL_JOB_WORKDIR" && exec {shlex.join(command)} 2>&1')
    return "; ".join(steps[:2]) + "; " + " && ".join(steps[2:])
