"""The batch/v1 Job that runs one attempt, as a plain dict (what is sent to the API server,
and what the golden files in tests/backends/testdata/kubernetes hold).

Invariants:

* The Job never runs its pods twice: ``backoffLimit: 0``, ``restartPolicy: Never``. A retry is
  a new attempt, a new key and a new Job, decided by the controller.
* ``podFailurePolicy`` fails the Job at once when a pod is disrupted (drain, eviction,
  preemption by Kubernetes: the ``DisruptionTarget`` condition), which the adapter reports as
  LOST, and when the main container exits non-zero, which puts the exit code into the Job's
  own ``Failed`` condition message: one list of Jobs then tells every outcome.
* Gangs (``nodes > 1``) are Indexed Jobs with ``completions == parallelism == nodes``; each pod
  gets ``JOB_COMPLETION_INDEX`` from Kubernetes.
* The pod runs as the user's uid and gid (``runAsNonRoot``, no privilege escalation, every
  capability dropped); without an identity (only with ``run_without_identity``) as its image's
  user.
* The variables of a data grant (signed URLs: secrets) are never in the Job: they are in a
  Secret of the attempt (:func:`grant_secret`, owned by the Job, so deleted with it), and the
  container reads them with ``secretKeyRef``.
* Output is deterministic: mappings are sorted, so equal inputs give equal bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpupool.backends.base import JobSpec, PosixIdentity
from gpupool.backends.kubernetes.naming import (
    CONTAINER,
    JOB_LABEL,
    KEY_ANNOTATION,
    MANAGED_BY,
    MAX_RUNTIME_ANNOTATION,
    POOL_ANNOTATION,
    POOL_LABEL,
    TEAM_LABEL,
    USER_ANNOTATION,
)
from gpupool.backends.kubernetes.options import KubernetesOptions

Obj = dict[str, Any]
VOLUME = "gpupool-attempt"


def cpu_quantity(cpus: float) -> str:
    """Whole CPUs as ``"16"``, fractions in millicores (``"8500m"``)."""
    millis = round(cpus * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def memory_quantity(gb: float) -> str:
    """gpupool's ``memory_gb`` (10^9 bytes) as ``"64G"``, fractions in megabytes."""
    mb = round(gb * 1000)
    return f"{mb // 1000}G" if mb % 1000 == 0 else f"{mb}M"


def labels_of(spec: JobSpec, name: str) -> dict[str, str]:
    return {
        MANAGED_BY[0]: MANAGED_BY[1],
        JOB_LABEL: name,
        POOL_LABEL: spec.pool,
        TEAM_LABEL: spec.team,
    }


def annotations_of(spec: JobSpec) -> dict[str, str]:
    notes = {KEY_ANNOTATION: spec.key, POOL_ANNOTATION: spec.pool, USER_ANNOTATION: spec.user}
    if spec.max_runtime_s is not None:
        notes[MAX_RUNTIME_ANNOTATION] = str(spec.max_runtime_s)
    return dict(sorted(notes.items()))


def security_context(identity: PosixIdentity | None) -> Obj:
    if identity is None:
        return {}
    groups = sorted({*identity.groups, identity.gid})
    return {
        "fsGroup": identity.gid,
        "runAsGroup": identity.gid,
        "runAsNonRoot": True,
        "runAsUser": identity.uid,
        "supplementalGroups": groups,
    }


def _resources(spec: JobSpec, gpu_resource: str) -> Obj:
    requests: Obj = {}
    limits: Obj = {}
    if spec.cpus > 0:
        requests["cpu"] = cpu_quantity(spec.cpus)
    if spec.memory_gb > 0:
        requests["memory"] = limits["memory"] = memory_quantity(spec.memory_gb)
    if spec.gpus_per_node > 0:  # extended resources: the limit is the request
        limits[gpu_resource] = str(spec.gpus_per_node)
    return {k: v for k, v in (("limits", limits), ("requests", requests)) if v}


def _volume(options: KubernetesOptions, attempt_dir: str, key: str) -> tuple[Obj, Obj]:
    """The attempt dir as a volume, mounted at the same path as on the control plane."""
    mount: Obj = {"mountPath": attempt_dir, "name": VOLUME}
    if options.workdir_claim:
        mount["subPath"] = key
        return {
            "name": VOLUME,
            "persistentVolumeClaim": {"claimName": options.workdir_claim},
        }, mount
    return {"hostPath": {"path": attempt_dir, "type": "Directory"}, "name": VOLUME}, mount


def secret_name(job: str) -> str:
    """The Secret holding the grant of the attempt whose Job is ``job``."""
    return f"{job}-grant"


def grant_secret(
    spec: JobSpec, *, job: str, job_uid: str, namespace: str, values: Mapping[str, str]
) -> Obj:
    """The Secret with a grant's variables, owned by the Job (the garbage collector deletes it
    with the Job)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "annotations": {KEY_ANNOTATION: spec.key},
            "labels": labels_of(spec, job),
            "name": secret_name(job),
            "namespace": namespace,
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": job_uid}
            ],
        },
        "stringData": dict(sorted(values.items())),
        "type": "Opaque",
    }


def _env_entry(name: str, value: str, job: str, secret_keys: frozenset[str]) -> Obj:
    if name in secret_keys:
        return {
            "name": name,
            "valueFrom": {"secretKeyRef": {"key": name, "name": secret_name(job)}},
        }
    return {"name": name, "value": value}


def job_manifest(
    spec: JobSpec,
    *,
    name: str,
    namespace: str,
    options: KubernetesOptions,
    image: str,
    attempt_dir: str,
    workdir: str,
    env: Mapping[str, str],
    identity: PosixIdentity | None,
    secret_keys: frozenset[str] = frozenset(),
) -> Obj:
    """The Job; ``env`` holds every variable, and those named in ``secret_keys`` are read from
    the attempt's Secret instead of being written into the Job."""
    labels = labels_of(spec, name)
    volume, mount = _volume(options, attempt_dir, spec.key)
    container: Obj = {
        "command": list(spec.command),
        "env": [_env_entry(k, v, name, secret_keys) for k, v in sorted(env.items())],
        "image": image,
        "name": CONTAINER,
        "resources": _resources(spec, options.gpu_resource),
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [mount],
        "workingDir": workdir,
    }
    pod: Obj = {
        "automountServiceAccountToken": False,  # a job has no business with the API server
        "containers": [container],
        "enableServiceLinks": False,  # no variables for every Service of the namespace
        "nodeSelector": dict(options.node_labels),
        "restartPolicy": "Never",
        "securityContext": security_context(identity),
        "terminationGracePeriodSeconds": options.stop_grace_s,
        "volumes": [volume],
    }
    if options.node_taints:
        pod["tolerations"] = [t.toleration() for t in options.node_taints]
    job_spec: Obj = {
        "backoffLimit": 0,
        "completions": spec.nodes,
        "parallelism": spec.nodes,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onPodConditions": [{"status": "True", "type": "DisruptionTarget"}],
                },
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": [0]},
                },
            ]
        },
        "template": {
            # The user too: an admission webhook sees the Job controller, not the user, as the
            # creator of these pods.
            "metadata": {
                "annotations": {KEY_ANNOTATION: spec.key, USER_ANNOTATION: spec.user},
                "labels": dict(labels),
            },
            "spec": pod,
        },
    }
    if spec.nodes > 1:
        job_spec["completionMode"] = "Indexed"
    if spec.max_runtime_s is not None:
        job_spec["activeDeadlineSeconds"] = spec.max_runtime_s
    if options.ttl_after_finished_s is not None:
        job_spec["ttlSecondsAfterFinished"] = options.ttl_after_finished_s
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "annotations": annotations_of(spec),
            "labels": labels,
            "name": name,
            "namespace": namespace,
        },
        "spec": dict(sorted(job_spec.items())),
    }
