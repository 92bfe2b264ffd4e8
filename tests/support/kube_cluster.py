"""The simulated cluster behind the stand-in API server (:mod:`support.kube_api`): the object
store, the Job controller, the garbage collector and a kubelet that runs each container's
command as a process on this machine.

What is simulated, and how (docs/kubernetes-backend.md repeats it):

* Scheduling: a pod goes to the first node whose labels match its ``nodeSelector``, whose
  ``NoSchedule``/``NoExecute`` taints it tolerates and that has the GPUs it asks for free;
  otherwise it stays Pending (``Unschedulable``).
* The kubelet: the image is not pulled; the container's ``command`` runs with its ``env``
  (``secretKeyRef`` read from the namespace's Secrets, waiting until they exist),
  ``workingDir``, and, when the stand-in runs as root, ``runAsUser``/``runAsGroup``/
  ``supplementalGroups``/``fsGroup``; stdout and stderr go to the pod's log. Volumes are not
  remapped: a ``hostPath`` (or a claim's directory plus ``subPath``) must be mounted at its own
  path, else the container never starts (``CreateContainerError``).
* The Job controller: pods per ``parallelism`` (Indexed: one per index, with its
  ``JOB_COMPLETION_INDEX``), ``backoffLimit``, ``podFailurePolicy`` (``FailJob`` on exit codes
  and pod conditions, with the real controller's message), ``activeDeadlineSeconds``, the
  ``FailureTarget`` → ``Failed`` sequence while pods terminate, ``Complete``, and
  ``ttlSecondsAfterFinished``.
* Deletion: a pod deleted with a grace period gets SIGTERM, and SIGKILL once the grace runs out;
  a Job deleted in the foreground keeps a ``deletionTimestamp`` until its pods are gone; a
  Secret is deleted once every Job that owns it is gone.

Everything runs on the wall clock, on one background thread that wakes every 20 ms.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import itertools
import os
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
TICK_S = 0.02
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def stamp(at: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if at is None else at, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Node:
    name: str
    labels: dict[str, str]
    gpus: int = 0
    taints: list[Obj] = field(default_factory=list)
    ready: bool = True
    unschedulable: bool = False

    def to_object(self, gpu_resource: str) -> Obj:
        spec: Obj = {}
        if self.taints:
            spec["taints"] = self.taints
        if self.unschedulable:
            spec["unschedulable"] = True
        amounts = {"cpu": "16", "memory": "64Gi", "pods": "110", gpu_resource: str(self.gpus)}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": dict(self.labels)},
            "spec": spec,
            "status": {
                "allocatable": amounts,
                "capacity": amounts,
                "conditions": [{"type": "Ready", "status": "True" if self.ready else "False"}],
            },
        }


@dataclass
class Pod:
    obj: Obj
    job: tuple[str, str]
    index: int
    log: Path
    process: subprocess.Popen[bytes] | None = None
    kill_at: float | None = None
    accounted: bool = False  # the Job controller has counted its end

    @property
    def key(self) -> tuple[str, str]:
        meta = self.obj["metadata"]
        return meta["namespace"], meta["name"]

    @property
    def phase(self) -> str:
        return str(self.obj["status"]["phase"])

    @property
    def ended(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def started(self) -> bool:
        return self.process is not None


class Cluster:
    """State and controllers. Every method takes :attr:`lock`; the HTTP layer calls them."""

    def __init__(
        self,
        work: Path,
        *,
        namespaces: set[str],
        nodes: list[Node],
        claims: dict[tuple[str, str], Path] | None = None,
        gpu_resource: str = "nvidia.com/gpu",
    ) -> None:
        self.lock = threading.RLock()
        self.work = work
        self.namespaces = set(namespaces)
        self.nodes = nodes
        self.claims = dict(claims or {})
        self.gpu_resource = gpu_resource
        self.jobs: dict[tuple[str, str], Obj] = {}
        self.secrets: dict[tuple[str, str], Obj] = {}
        self.pods: dict[tuple[str, str], Pod] = {}
        self.started_pods = 0  # pods whose container was started, ever
        self._version = itertools.count(1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kube-stand-in", daemon=True)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with self.lock:
            for pod in self.pods.values():
                if pod.process is not None and pod.process.poll() is None:
                    _signal(pod.process, signal.SIGKILL)
                    pod.process.wait(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(TICK_S):
            with self.lock:
                self.sync()

    def resource_version(self) -> str:
        return str(next(self._version))

    # -- API operations ------------------------------------------------------------------------

    def create_job(self, namespace: str, body: Obj) -> Obj:
        job = copy.deepcopy(body)
        meta = job.setdefault("metadata", {})
        meta.update(
            namespace=namespace,
            uid=str(uuid.uuid4()),
            creationTimestamp=stamp(),
            resourceVersion=self.resource_version(),
            generation=1,
        )
        spec = job["spec"]
        spec.setdefault("parallelism", 1)
        spec.setdefault("completions", spec["parallelism"])
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        selector_labels = {"batch.kubernetes.io/controller-uid": meta["uid"]}
        spec["selector"] = {"matchLabels": selector_labels}
        template_meta = spec["template"].setdefault("metadata", {})
        template_meta.setdefault("labels", {}).update(
            {**selector_labels, JOB_NAME_LABEL: meta["name"]}
        )
        job["status"] = {}
        self.jobs[(namespace, meta["name"])] = job
        self.sync()
        return job

    def create_secret(self, namespace: str, body: Obj) -> Obj:
        secret = copy.deepcopy(body)
        meta = secret.setdefault("metadata", {})
        meta.update(
            namespace=namespace,
            uid=str(uuid.uuid4()),
            creationTimestamp=stamp(),
            resourceVersion=self.resource_version(),
        )
        # As the API server does: stringData is write-only, merged into data (base64).
        data = dict(secret.get("data") or {})
        for key, value in (secret.pop("stringData", None) or {}).items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        secret["data"] = data
        self.secrets[(namespace, meta["name"])] = secret
        return secret

    def delete_job(self, namespace: str, name: str, propagation: str) -> Obj:
        job = self.jobs[(namespace, name)]
        if propagation == "Foreground":
            meta = job["metadata"]
            meta.setdefault("deletionTimestamp", stamp())
            finalizers = meta.setdefault("finalizers", [])
            if "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
            meta["resourceVersion"] = self.resource_version()
        else:  # Background: gone now, its pods soon (the garbage collector)
            del self.jobs[(namespace, name)]
        self.sync()
        return job

    def delete_pods(self, namespace: str, selected: list[Pod], grace_s: int | None) -> None:
        for pod in selected:
            self._delete_pod(pod, grace_s)
        self.sync()

    # -- the controllers -------------------------------------------------------------------------

    def sync(self) -> None:
        now = time.time()
        for pod in list(self.pods.values()):
            self._kubelet(pod, now)
        for key, job in list(self.jobs.items()):
            self._job_controller(key, job, now)
        self._garbage_collector(now)

    def _pods_of(self, key: tuple[str, str]) -> list[Pod]:
        return [p for p in self.pods.values() if p.job == key]

    def _job_controller(self, key: tuple[str, str], job: Obj, now: float) -> None:
        spec, status, meta = job["spec"], job["status"], job["metadata"]
        conditions = status.setdefault("conditions", [])
        done = any(c["type"] in ("Complete", "Failed") for c in conditions)
        pods = self._pods_of(key)
        for pod in pods:
            if pod.ended and not pod.accounted:
                pod.accounted = True
                if pod.phase == "Succeeded":
                    status["succeeded"] = status.get("succeeded", 0) + 1
                    if spec["completionMode"] == "Indexed":
                        status["completedIndexes"] = _indexes(
                            status.get("completedIndexes"), pod.index
                        )
                else:
                    status["failed"] = status.get("failed", 0) + 1
                    if not done and not _condition(job, "FailureTarget"):
                        self._on_pod_failure(job, pod)
        status.setdefault("startTime", stamp(now))
        active = [p for p in pods if not p.ended]
        failing = _condition(job, "FailureTarget")
        deadline = spec.get("activeDeadlineSeconds")
        started = _seconds(status["startTime"])
        if not done and not failing and deadline is not None and now - started >= deadline:
            failing = _add_condition(
                job,
                "FailureTarget",
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            )
        if failing is not None and not done:
            for pod in active:
                self._delete_pod(pod, None)
            if not active:
                _add_condition(job, "Failed", failing["reason"], failing["message"])
                done = True
        if not done and failing is None and self._all_succeeded(job, pods):
            _add_condition(
                job,
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            )
            _add_condition(
                job, "Complete", "CompletionsReached", "Reached expected number of succeeded pods"
            )
            status["completionTime"] = stamp(now)
            done = True
        deleting = "deletionTimestamp" in meta
        if not done and failing is None and not deleting and not spec.get("suspend"):
            self._create_missing_pods(key, job, pods)
        status["active"] = sum(1 for p in self._pods_of(key) if not p.ended)
        status["ready"] = sum(1 for p in self._pods_of(key) if _ready(p.obj))
        status["terminating"] = sum(
            1 for p in self._pods_of(key) if "deletionTimestamp" in p.obj["metadata"]
        )
        status = {k: v for k, v in status.items() if v is not None}
        job["status"] = status
        if done and spec.get("ttlSecondsAfterFinished") is not None:
            finished = max(_seconds(c["lastTransitionTime"]) for c in status["conditions"])
            if now >= finished + spec["ttlSecondsAfterFinished"]:
                self.jobs.pop(key, None)

    def _on_pod_failure(self, job: Obj, pod: Pod) -> None:
        spec = job["spec"]
        name = pod.obj["metadata"]["name"]
        namespace = pod.obj["metadata"]["namespace"]
        rules = (spec.get("podFailurePolicy") or {}).get("rules") or ()
        for index, rule in enumerate(rules):
            message = _rule_match(rule, pod.obj, namespace, name, index)
            if message is None:
                continue
            if rule["action"] == "FailJob":
                _add_condition(job, "FailureTarget", "PodFailurePolicy", message)
                return
            if rule["action"] == "Ignore":
                return
            break  # Count: as if no rule matched
        if job["status"].get("failed", 0) > spec["backoffLimit"]:
            _add_condition(
                job,
                "FailureTarget",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )

    def _all_succeeded(self, job: Obj, pods: list[Pod]) -> bool:
        spec, status = job["spec"], job["status"]
        if spec["completionMode"] == "Indexed":
            done = _index_set(status.get("completedIndexes"))
            return done >= set(range(spec["completions"]))
        return status.get("succeeded", 0) >= spec["completions"]

    def _create_missing_pods(self, key: tuple[str, str], job: Obj, pods: list[Pod]) -> None:
        spec, status = job["spec"], job["status"]
        if spec["completionMode"] == "Indexed":
            taken = {p.index for p in pods if not p.ended or p.phase == "Succeeded"}
            taken |= _index_set(status.get("completedIndexes"))
            wanted = [i for i in range(spec["completions"]) if i not in taken]
        else:
            running = sum(1 for p in pods if not p.ended)
            left = spec["completions"] - status.get("succeeded", 0) - running
            wanted = [0] * max(0, min(spec["parallelism"] - running, left))
        if status.get("failed", 0) > spec["backoffLimit"]:
            return
        for index in wanted[: spec["parallelism"]]:
            self._create_pod(key, job, index)

    def _create_pod(self, key: tuple[str, str], job: Obj, index: int) -> None:
        namespace, job_name = key
        template = copy.deepcopy(job["spec"]["template"])
        meta = template["metadata"]
        indexed = job["spec"]["completionMode"] == "Indexed"
        prefix = f"{job_name}-{index}-" if indexed else f"{job_name}-"
        name = prefix + uuid.uuid4().hex[:5]
        if indexed:
            meta.setdefault("annotations", {})[INDEX_KEY] = str(index)
            meta["labels"][INDEX_KEY] = str(index)
            for container in template["spec"]["containers"]:
                env = container.setdefault("env", [])
                env.append({"name": "JOB_COMPLETION_INDEX", "value": str(index)})
        meta.update(
            name=name,
            namespace=namespace,
            uid=str(uuid.uuid4()),
            creationTimestamp=stamp(),
            resourceVersion=self.resource_version(),
            ownerReferences=[
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job_name,
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            finalizers=["batch.kubernetes.io/job-tracking"],
        )
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": template["spec"],
            "status": {"phase": "Pending", "conditions": []},
        }
        log = self.work / "logs" / f"{namespace}_{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.pods[(namespace, name)] = Pod(obj, key, index, log)

    def _garbage_collector(self, now: float) -> None:
        alive = {job["metadata"]["uid"] for job in self.jobs.values()}
        for key, secret in list(self.secrets.items()):
            owners = {o["uid"] for o in secret["metadata"].get("ownerReferences") or ()}
            if owners and not owners & alive:
                del self.secrets[key]  # every owner is gone
        for key, job in list(self.jobs.items()):
            if "deletionTimestamp" not in job["metadata"]:
                continue
            pods = self._pods_of(key)
            for pod in pods:
                self._delete_pod(pod, None)
            if not pods:
                del self.jobs[key]
        for key, pod in list(self.pods.items()):
            if pod.job not in self.jobs and "deletionTimestamp" not in pod.obj["metadata"]:
                self._delete_pod(pod, None)  # its Job was deleted in the background
            terminated = pod.ended or pod.process is None
            counted = pod.accounted or pod.job not in self.jobs or pod.process is None
            if "deletionTimestamp" in pod.obj["metadata"] and terminated and counted:
                del self.pods[key]

    # -- the kubelet -----------------------------------------------------------------------------

    def _delete_pod(self, pod: Pod, grace_s: int | None) -> None:
        meta = pod.obj["metadata"]
        if grace_s is None:
            grace_s = int(pod.obj["spec"].get("terminationGracePeriodSeconds", 30))
        kill_at = time.time() + grace_s
        if "deletionTimestamp" in meta and pod.kill_at is not None and pod.kill_at <= kill_at:
            return  # already terminating, at least as fast
        meta["deletionTimestamp"] = stamp()
        meta["deletionGracePeriodSeconds"] = grace_s
        pod.kill_at = kill_at
        if pod.process is not None and pod.process.poll() is None:
            _signal(pod.process, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
        elif pod.process is None and not pod.ended:
            pod.obj["status"]["phase"] = "Failed"  # never started: nothing to stop
            pod.accounted = True

    def _kubelet(self, pod: Pod, now: float) -> None:
        status = pod.obj["status"]
        if pod.ended:
            return
        if pod.process is None:
            if "deletionTimestamp" in pod.obj["metadata"]:
                return
            if "nodeName" not in pod.obj["spec"] and not self._schedule(pod):
                return
            self._start(pod)
            return
        code = pod.process.poll()
        if code is None:
            if pod.kill_at is not None and now >= pod.kill_at:
                _signal(pod.process, signal.SIGKILL)
            return
        exit_code = code if code >= 0 else 128 - code
        status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
        status["conditions"] = [
            c for c in status["conditions"] if c["type"] not in ("Ready", "ContainersReady")
        ] + [
            _cond("Ready", "False", "PodCompleted"),
            _cond("ContainersReady", "False", "PodCompleted"),
        ]
        reason = "Completed" if exit_code == 0 else "Error"
        started = status["containerStatuses"][0]["state"]["running"]["startedAt"]
        status["containerStatuses"][0].update(
            ready=False,
            started=False,
            state={
                "terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "startedAt": started,
                    "finishedAt": stamp(now),
                }
            },
        )

    def _schedule(self, pod: Pod) -> bool:
        spec = pod.obj["spec"]
        wanted = _gpus(spec, self.gpu_resource)
        for node in self.nodes:
            if not node.ready or node.unschedulable:
                continue
            if any(node.labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
                continue
            if not all(_tolerated(t, spec.get("tolerations") or ()) for t in node.taints):
                continue
            used = sum(
                _gpus(p.obj["spec"], self.gpu_resource)
                for p in self.pods.values()
                if p.obj["spec"].get("nodeName") == node.name and not p.ended
            )
            if node.gpus - used >= wanted:
                spec["nodeName"] = node.name
                pod.obj["status"]["conditions"] = [_cond("PodScheduled", "True")]
                return True
        pod.obj["status"]["conditions"] = [
            _cond("PodScheduled", "False", "Unschedulable", "0 nodes are available")
        ]
        return False

    def _start(self, pod: Pod) -> None:
        spec = pod.obj["spec"]
        container = spec["containers"][0]
        status = pod.obj["status"]
        problem = self._mount_problem(pod)
        run_as = _run_as(spec, container)
        if problem is None and os.geteuid() != 0 and run_as["user"] not in (None, os.getuid()):
            problem = f"the stand-in runs as uid {os.getuid()} and cannot run as {run_as['user']}"
        if problem is None and run_as["non_root"] and (run_as["user"] or os.geteuid()) == 0:
            problem = "container has runAsNonRoot and image will run as root"
        if problem is not None:
            status["containerStatuses"] = [_waiting(container, "CreateContainerError", problem)]
            return
        resolved = self._env(pod, container)
        if isinstance(resolved, str):
            status["containerStatuses"] = [
                _waiting(container, "CreateContainerConfigError", resolved)
            ]
            return  # retried on the next tick, as the kubelet does
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **resolved}
        kwargs: dict[str, Any] = {}
        if os.geteuid() == 0 and run_as["user"] is not None:
            kwargs = {
                "user": run_as["user"],
                "group": run_as["group"],
                "extra_groups": run_as["groups"],
            }
        try:
            with open(pod.log, "ab") as out:
                pod.process = subprocess.Popen(
                    [*container.get("command", ()), *container.get("args", ())],
                    env=env,
                    cwd=container.get("workingDir") or "/",
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: signals reach its children
                    **kwargs,
                )
        except OSError as exc:
            status["containerStatuses"] = [_waiting(container, "StartError", str(exc))]
            status["phase"] = "Failed"
            return
        self.started_pods += 1
        status.update(phase="Running", startTime=stamp(), hostIP="127.0.0.1", podIP="127.0.0.1")
        status["conditions"] = [
            _cond("PodScheduled", "True"),
            _cond("Initialized", "True"),
            _cond("Ready", "True"),
            _cond("ContainersReady", "True"),
        ]
        status["containerStatuses"] = [
            {
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": stamp()}},
            }
        ]

    def _env(self, pod: Pod, container: Obj) -> dict[str, str] | str:
        """The container's variables, or why they cannot be had (a Secret or key missing)."""
        namespace = pod.obj["metadata"]["namespace"]
        env: dict[str, str] = {}
        for entry in container.get("env") or ():
            ref = (entry.get("valueFrom") or {}).get("secretKeyRef")
            if ref is None:
                env[entry["name"]] = entry.get("value", "")
                continue
            secret = self.secrets.get((namespace, ref["name"]))
            if secret is None:
                return f'secret "{ref["name"]}" not found'
            if ref["key"] not in secret["data"]:
                return f"couldn't find key {ref['key']} in Secret {namespace}/{ref['name']}"
            env[entry["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        return env

    def _mount_problem(self, pod: Pod) -> str | None:
        """Why the stand-in cannot give the container its volumes (it does not remap paths)."""
        spec = pod.obj["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes") or ()}
        namespace = pod.obj["metadata"]["namespace"]
        for container in spec["containers"]:
            for mount in container.get("volumeMounts") or ():
                volume = volumes.get(mount["name"], {})
                if "hostPath" in volume:
                    source = Path(volume["hostPath"]["path"])
                elif "persistentVolumeClaim" in volume:
                    claim = volume["persistentVolumeClaim"]["claimName"]
                    if (namespace, claim) not in self.claims:
                        return f'persistentvolumeclaim "{claim}" not found'
                    source = self.claims[(namespace, claim)]
                else:
                    return f"volume {mount['name']!r}: only hostPath and claims are simulated"
                source = source / mount.get("subPath", "")
                if not source.is_dir():
                    return f"{source} is not a directory"
                if source.resolve() != Path(mount["mountPath"]).resolve():
                    return f"cannot mount {source} at {mount['mountPath']} (no remapping here)"
        return None


# -- helpers ----------------------------------------------------------------------------------


def _signal(process: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _cond(kind: str, status: str, reason: str = "", message: str = "") -> Obj:
    out: Obj = {"type": kind, "status": status, "lastTransitionTime": stamp()}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def _condition(job: Obj, kind: str) -> Obj | None:
    for c in job["status"].get("conditions") or ():
        if c["type"] == kind and c["status"] == "True":
            return dict(c)
    return None


def _add_condition(job: Obj, kind: str, reason: str, message: str) -> Obj:
    found = _cond(kind, "True", reason, message)
    found["lastProbeTime"] = found["lastTransitionTime"]
    job["status"].setdefault("conditions", []).append(found)
    job["metadata"]["resourceVersion"] = str(int(job["metadata"]["resourceVersion"]) + 1)
    return found


def _ready(pod: Obj) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", ())
    )


def _seconds(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


def _index_set(text: str | None) -> set[int]:
    out: set[int] = set()
    for part in (text or "").split(","):
        if "-" in part:
            low, high = part.split("-")
            out |= set(range(int(low), int(high) + 1))
        elif part:
            out.add(int(part))
    return out


def _indexes(text: str | None, index: int) -> str:
    return ",".join(str(i) for i in sorted(_index_set(text) | {index}))


def _gpus(spec: Obj, resource: str) -> int:
    total = 0
    for container in spec["containers"]:
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(limits.get(resource, 0))
    return total


def _tolerated(taint: Obj, tolerations: Any) -> bool:
    if taint.get("effect") not in ("NoSchedule", "NoExecute"):
        return True
    for t in tolerations:
        if t.get("effect") not in (None, "", taint["effect"]):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value") == taint.get("value"):
            return True
    return False


def _run_as(spec: Obj, container: Obj) -> dict[str, Any]:
    pod_ctx = spec.get("securityContext") or {}
    own = container.get("securityContext") or {}
    groups = sorted(
        {
            *pod_ctx.get("supplementalGroups", ()),
            *([pod_ctx["fsGroup"]] if "fsGroup" in pod_ctx else []),
        }
    )
    return {
        "user": own.get("runAsUser", pod_ctx.get("runAsUser")),
        "group": own.get("runAsGroup", pod_ctx.get("runAsGroup")),
        "groups": groups,
        "non_root": bool(own.get("runAsNonRoot", pod_ctx.get("runAsNonRoot", False))),
    }


def _waiting(container: Obj, reason: str, message: str) -> Obj:
    return {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": "",
        "ready": False,
        "restartCount": 0,
        "started": False,
        "state": {"waiting": {"reason": reason, "message": message}},
    }


def _rule_match(rule: Obj, pod: Obj, namespace: str, name: str, index: int) -> str | None:
    """The Job controller's message when ``rule`` matches the failed ``pod`` (its wording)."""
    action = rule["action"]
    codes = rule.get("onExitCodes")
    if codes is not None:
        for status in pod["status"].get("containerStatuses") or ():
            if codes.get("containerName") not in (None, status["name"]):
                continue
            code = ((status.get("state") or {}).get("terminated") or {}).get("exitCode")
            if code is None or code == 0:
                continue
            inside = code in codes["values"]
            if inside == (codes["operator"] == "In"):
                return (
                    f"Container {status['name']} for pod {namespace}/{name} failed with exit "
                    f"code {code} matching {action} rule at index {index}"
                )
        return None
    for wanted in rule.get("onPodConditions") or ():
        for c in pod["status"].get("conditions") or ():
            if c["type"] == wanted["type"] and c["status"] == wanted.get("status", "True"):
                return (
                    f"Pod {namespace}/{name} has condition {c['type']} matching {action} rule "
                    f"at index {index}"
                )
    return None
