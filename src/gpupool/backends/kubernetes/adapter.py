"""The Kubernetes backend: every attempt is one batch/v1 Job in its team's namespace
(docs/kubernetes-backend.md).

Invariants:

* **One run per key.** The Job's name is a pure function of the key (:func:`.naming.job_name`)
  and the API server creates a name at most once per namespace, so of any number of concurrent
  or repeated submits exactly one creates the Job; the others get 409 AlreadyExists, read the
  Job, check that it is this key's of this pool (else ``BackendRejected``) and return the same
  handle. The Job itself never starts a second pod for an index (``backoffLimit: 0``).
* **Handles outlive the adapter.** A handle names the namespace and the Job; a new instance,
  in this process or after a restart, needs nothing else (the attempt dir only adds what
  Kubernetes may have forgotten: the submission, a cancel, a final status). A key whose attempt
  dir records a submission is never created again, even once its Job has been deleted.
* **One list per poll.** ``poll`` lists the pool's Jobs in every namespace with one label
  selector; the pods are listed (once, for the whole poll) only when a failed Job's message
  does not carry the exit code.
* **No final status while a pod may live**: see :mod:`.status`.
* ``cancel`` never blocks for the grace period: it records the cancel, deletes the Job with
  foreground propagation and deletes its pods with ``grace_s`` (SIGTERM now, SIGKILL when the
  grace runs out, both by the kubelet).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpupool.backends.base import (
    FINAL_STATES,
    AdapterContext,
    BackendStatus,
    Capability,
    JobHandle,
    JobSpec,
    LogChunk,
    PoolCapacity,
    PosixIdentity,
    contract_env,
)
from gpupool.backends.errors import BackendError, BackendMisconfigured, BackendRejected
from gpupool.backends.kubernetes.attempt import AttemptDir
from gpupool.backends.kubernetes.client import ClientFactory, KubeApi, Obj, official_client
from gpupool.backends.kubernetes.errors import (
    is_already_exists,
    is_not_found,
    map_kubernetes_errors,
)
from gpupool.backends.kubernetes.manifest import grant_secret, job_manifest
from gpupool.backends.kubernetes.naming import (
    CONTAINER,
    INDEX_ANNOTATION,
    job_name,
    job_selector,
    pool_selector,
)
from gpupool.backends.kubernetes.options import KubernetesOptions, Taint
from gpupool.backends.kubernetes.status import JobView, exit_code_of_pods, verdict
from gpupool.backends.validation import check_spec

LOG_CHUNK_MAX = 1 << 20  # bytes per logs() call
_SAFE_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")  # a directory name
_ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*\Z")  # what Kubernetes accepts
# The device plugin and the container runtime decide which GPUs a pod sees through these.
_RESERVED_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"})


class KubernetesBackend:
    name = "kubernetes"
    capabilities = frozenset(
        {Capability.GANG, Capability.LOG_STREAM, Capability.CAPACITY, Capability.POSIX_IDENTITY}
    )

    def __init__(
        self,
        ctx: AdapterContext,
        *,
        client_factory: ClientFactory | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ctx = ctx
        self.options = KubernetesOptions.parse(ctx.options, ctx.gpu_type)
        self.root = self.options.root(ctx.state_dir, ctx.pool)
        self._factory = client_factory or official_client
        self._clock = clock  # wall clock: cancel records carry it
        self._chown = os.geteuid() == 0  # only root can hand the job dirs to the job's user
        self._lock = threading.Lock()  # guards _client
        self._client: KubeApi | None = None

    def __repr__(self) -> str:
        return f"KubernetesBackend(pool={self.ctx.pool!r})"

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _api(self) -> KubeApi:
        # Built on first use: a pool whose kubeconfig points at a cluster that is down must
        # still load (its calls then raise BackendUnavailable until the cluster answers).
        with self._lock:
            if self._client is None:
                where = "in-cluster configuration" if self.options.in_cluster else "kubeconfig"
                with self._mapped(f"load the {where}", BackendMisconfigured):
                    self._client = self._factory(
                        self.options.kubeconfig,
                        self.options.context,
                        self.options.in_cluster,
                        self.options.request_timeout_s,
                    )
            return self._client

    @staticmethod
    def _mapped(
        action: str, invalid: type[BackendError] = BackendRejected
    ) -> AbstractContextManager[None]:
        return map_kubernetes_errors(action, invalid=invalid)

    # -- submit ------------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> JobHandle:
        self._validate(spec)
        identity = self._identity(spec)
        image = spec.image or self.options.image
        if not image:
            raise BackendRejected(
                f"job {spec.job_id!r} names no image and pool {self.ctx.pool!r} has no "
                "options.image: give the job an image or the pool a runner image"
            )
        namespace = self.options.namespace_for(spec.team, spec.pool)
        name = job_name(spec.key, self.options.job_name_prefix)
        attempt = AttemptDir(self.root / spec.key)
        with self._mapped("prepare the attempt directory", BackendMisconfigured):
            attempt.prepare(identity if self._chown else None)
            earlier = attempt.submitted()
        if earlier is not None:
            # Created before: its Job may be gone by now (TTL, deleted), and creating it again
            # would run the attempt a second time.
            return self._handle(spec.key, earlier["namespace"], earlier["name"], attempt)
        grant = spec.grant.env() if spec.grant is not None else {}
        body = job_manifest(
            spec,
            name=name,
            namespace=namespace,
            options=self.options,
            image=image,
            attempt_dir=str(attempt.path),
            workdir=str(attempt.work),
            env={**self._env(spec, attempt), **grant},
            identity=identity,
            secret_keys=frozenset(grant),
        )
        api = self._api()
        with self._mapped(f"create Job {namespace}/{name}"):
            try:
                created = api.create_job(namespace, body)
            except Exception as exc:
                if not is_already_exists(exc):
                    raise
                created = api.read_job(namespace, name)
                self._check_owner(spec, JobView.from_object(created))
        if grant:
            # After the Job, to be owned by it; its pod waits (CreateContainerConfigError, retried
            # by the kubelet) until the Secret is there. A retried submit adopts both.
            uid = str((created.get("metadata") or {}).get("uid", ""))
            secret = grant_secret(spec, job=name, job_uid=uid, namespace=namespace, values=grant)
            with self._mapped(f"create Secret {namespace}/{secret['metadata']['name']}"):
                try:
                    api.create_secret(namespace, secret)
                except Exception as exc:
                    if not is_already_exists(exc):
                        raise
        with self._mapped("record the submission", BackendMisconfigured):
            attempt.record_submitted(namespace, name)
        return self._handle(spec.key, namespace, name, attempt)

    def _validate(self, spec: JobSpec) -> None:
        check_spec(spec, self.ctx.pool)
        if not _SAFE_KEY.match(spec.key):
            raise BackendRejected(f"attempt key {spec.key!r} cannot be a directory name")
        if spec.nodes < 1 or spec.gpus_per_node < 0 or spec.cpus < 0 or spec.memory_gb < 0:
            raise BackendRejected(
                f"invalid shape: {spec.nodes} nodes x {spec.gpus_per_node} GPUs, "
                f"{spec.cpus} CPUs, {spec.memory_gb} GB"
            )
        bad = sorted(name for name in spec.env if not _ENV_NAME.match(name))
        if bad:
            raise BackendRejected(f"environment variable names Kubernetes refuses: {bad}")

    def _identity(self, spec: JobSpec) -> PosixIdentity | None:
        identity = spec.posix
        if identity is None:
            if self.options.run_without_identity:
                return None
            raise BackendRejected(
                f"user {spec.user!r} has no POSIX identity (uid, gid) in the configuration, "
                "and a kubernetes pool runs every job as its user: add them under users: (or "
                "set the pool's options.run_without_identity to run as the image's user)"
            )
        if 0 in (identity.uid, identity.gid):
            raise BackendRejected(f"user {spec.user!r} maps to uid or gid 0: never run as root")
        return identity

    def _env(self, spec: JobSpec, attempt: AttemptDir) -> dict[str, str]:
        user_env = {k: v for k, v in spec.env.items() if k not in _RESERVED_ENV}
        env = contract_env(
            replace(spec, env=user_env, grant=None),  # a grant's variables go in a Secret
            str(attempt.work),
            str(attempt.inputs),
            str(attempt.outputs),
        )
        # The device plugin gives the container exactly its GPUs, numbered from 0.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(spec.gpus_per_node))
        if spec.gpus_per_node == 0:
            # Without it, an image built FROM a CUDA image (NVIDIA_VISIBLE_DEVICES=all) sees
            # every GPU of the node through the NVIDIA container runtime.
            env["NVIDIA_VISIBLE_DEVICES"] = "void"
        return env

    def _check_owner(self, spec: JobSpec, job: JobView) -> None:
        if job.key != spec.key or job.pool != spec.pool:
            raise BackendRejected(
                f"namespace {job.namespace!r} already has a Job {job.name!r} that gpupool did "
                f"not create for attempt {spec.key} of pool {spec.pool!r}"
            )

    def _handle(self, key: str, namespace: str, name: str, attempt: AttemptDir) -> JobHandle:
        data = {"namespace": namespace, "name": name, "attempt_dir": str(attempt.path)}
        return JobHandle(self.name, self.ctx.pool, f"{namespace}/{name}", key, data)

    # -- poll ----------------------------------------------------------------------------------

    def poll(self, handles: Sequence[JobHandle]) -> Mapping[str, BackendStatus]:
        if not handles:
            return {}
        for handle in handles:
            self._check_handle(handle)
        api = self._api()
        with self._mapped("list Jobs"):
            listed = api.list_jobs(pool_selector(self.ctx.pool))  # one request for all
        # By namespace and name: installations sharing a cluster (and a pool name) differ in
        # their job_name_prefix, never in keys. By key for a handle that lacks its Job's name.
        by_name: dict[tuple[str, str], JobView] = {}
        by_key: dict[str, JobView] = {}
        for obj in listed:
            view = JobView.from_object(obj)
            if view.key is not None and view.pool == self.ctx.pool:
                by_name[(view.namespace, view.name)] = view
                by_key.setdefault(view.key, view)
        pods: list[Obj] | None = None
        statuses: dict[str, BackendStatus] = {}
        with self._mapped("read attempt records", BackendMisconfigured):
            for handle in handles:
                attempt = self._attempt(handle)
                where = (handle.data.get("namespace", ""), handle.data.get("name", ""))
                job = by_name.get(where) if all(where) else by_key.get(handle.key)
                if job is not None and job.key != handle.key:
                    job = None  # a Job of that name made for another key is not this attempt's
                if job is None and (memo := attempt.final()) is not None:
                    statuses[handle.key] = memo
                    continue
                cancelled = attempt.cancel_request() is not None
                status = verdict(job, cancelled=cancelled)
                if job is not None and _wants_pod_exit_code(job, status):
                    if pods is None:
                        pods = self._pool_pods(api)
                    mine = [p for p in pods if _job_of(p) == job.name]
                    status = verdict(
                        job, cancelled=cancelled, pod_exit_code=exit_code_of_pods(mine)
                    )
                if status.state in FINAL_STATES and job is not None and attempt.final() is None:
                    attempt.record_final(status)  # the answer once the Job is gone
                statuses[handle.key] = status
        return statuses

    def _pool_pods(self, api: KubeApi) -> list[Obj]:
        with self._mapped("list pods"):
            return api.list_pods(pool_selector(self.ctx.pool))

    # -- logs ------------------------------------------------------------------------------------

    def logs(self, handle: JobHandle, offset: int = 0) -> LogChunk:
        """The main container's log of the Job's first pod (index 0 of a gang), read as a stream
        from the pod log API, ``offset`` bytes skipped, at most 1 MiB returned."""
        offset = max(0, offset)
        # Decide "final" before reading: output written before the end is then all there.
        final = self.poll([handle])[handle.key].state in FINAL_STATES
        located = self._locate(handle)
        if located is None:
            return LogChunk(b"", offset, complete=final)
        namespace, name = located
        api = self._api()
        with self._mapped(f"list the pods of {namespace}/{name}"):
            pods = api.list_pods(job_selector(name), namespace=namespace)
        pod = _first_pod(pods)
        if pod is None:
            return LogChunk(b"", offset, complete=final)
        data = bytearray()
        skip = offset
        with self._mapped(f"read the log of {namespace}/{pod}"):
            stream = api.pod_log(namespace, pod, CONTAINER, offset + LOG_CHUNK_MAX + 1)
            try:
                for piece in stream:
                    if skip:
                        cut = min(skip, len(piece))
                        piece, skip = piece[cut:], skip - cut
                    data += piece
                    if len(data) > LOG_CHUNK_MAX:
                        break
            except Exception as exc:
                # 400: the container has not started; 404: the pod went away meanwhile.
                if not (is_not_found(exc) or _status(exc) == 400):
                    raise
                return LogChunk(b"", offset, complete=final and is_not_found(exc))
            finally:
                close = getattr(stream, "close", None)
                if callable(close):
                    close()  # the connection now, not when the generator is collected
        more = len(data) > LOG_CHUNK_MAX
        chunk = bytes(data[:LOG_CHUNK_MAX])
        return LogChunk(chunk, offset + len(chunk), complete=final and not more)

    # -- cancel ----------------------------------------------------------------------------------

    def cancel(self, handle: JobHandle, grace_s: float) -> None:
        located = self._locate(handle)
        if located is None:
            return  # never created, or gone: nothing to stop
        namespace, name = located
        attempt = self._attempt(handle)
        grace = max(0, int(grace_s + 0.999))  # whole seconds, never shorter than asked
        api = self._api()
        with self._mapped(f"cancel Job {namespace}/{name}"):
            if attempt.cancel_request() is None:
                try:
                    job = JobView.from_object(api.read_job(namespace, name))
                except Exception as exc:
                    if not is_not_found(exc):
                        raise
                    return  # never created, or gone: nothing to stop
                if job.final or job.key != handle.key:
                    return  # ended already (its outcome stands), or not ours
                # The record first: however the Job now ends, poll reports CANCELLED.
                attempt.record_cancel(self._clock(), grace)
            # Repeated on every cancel: a crash between the record and the deletes is healed.
            _ignore_missing(lambda: api.delete_job(namespace, name, grace))
            _ignore_missing(lambda: api.delete_pods(namespace, job_selector(name), grace))

    # -- capacity --------------------------------------------------------------------------------

    def pool_capacity(self) -> PoolCapacity:
        """Schedulable nodes with the pool's labels, taints it tolerates and GPUs, and the fewest
        allocatable GPUs on one of them."""
        selector = ",".join(f"{k}={v}" for k, v in self.options.node_labels.items())
        api = self._api()
        with self._mapped("list nodes"):
            nodes = api.list_nodes(selector)
        gpus = [
            n
            for node in nodes
            if _schedulable(node, self.options.node_taints)
            and (n := _allocatable(node, self.options.gpu_resource)) > 0
        ]
        return PoolCapacity(len(gpus), min(gpus, default=0))

    # -- helpers ---------------------------------------------------------------------------------

    def _check_handle(self, handle: JobHandle) -> None:
        if handle.backend != self.name:
            raise BackendRejected(f"handle of backend {handle.backend!r} given to {self.name!r}")

    def _attempt(self, handle: JobHandle) -> AttemptDir:
        if "attempt_dir" in handle.data:
            return AttemptDir(Path(handle.data["attempt_dir"]))
        if not _SAFE_KEY.match(handle.key):
            raise BackendRejected(f"attempt key {handle.key!r} cannot be a directory name")
        return AttemptDir(self.root / handle.key)

    def _locate(self, handle: JobHandle) -> tuple[str, str] | None:
        """The namespace and name of a handle's Job (from the handle; a handle without them is
        looked up by its key; ``None``: there is no such Job)."""
        self._check_handle(handle)
        if handle.data.get("namespace") and handle.data.get("name"):
            return handle.data["namespace"], handle.data["name"]
        found = self._find(handle.key)
        return (found.namespace, found.name) if found is not None else None

    def find(self, key: str) -> JobHandle | None:
        """The Job of ``key`` of this pool, in whichever namespace it is (``Finder``): one list
        with its name's label, which the key decides."""
        found = self._find(key)
        if found is None or not _SAFE_KEY.match(key):
            return None
        return self._handle(key, found.namespace, found.name, AttemptDir(self.root / key))

    def _find(self, key: str) -> JobView | None:
        name = job_name(key, self.options.job_name_prefix)
        with self._mapped(f"look up the Job of {key}"):
            listed = self._api().list_jobs(job_selector(name))
        for obj in listed:
            view = JobView.from_object(obj)
            if view.key == key and view.pool == self.ctx.pool:
                return view
        return None


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def _ignore_missing(call: Callable[[], Any]) -> None:
    try:
        call()
    except Exception as exc:
        if not is_not_found(exc):
            raise


def _wants_pod_exit_code(job: JobView, status: BackendStatus) -> bool:
    failed = job.is_true("Failed")
    return (
        failed is not None
        and status.exit_code is None
        and failed.reason in ("PodFailurePolicy", "BackoffLimitExceeded")
        and "DisruptionTarget" not in failed.message
    )


def _job_of(pod: Obj) -> str | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get("gpupool.io/job")


def _first_pod(pods: Sequence[Obj]) -> str | None:
    """The pod whose log is the attempt's: index 0 (a gang's first), the newest if several."""

    def order(pod: Obj) -> tuple[int, str]:
        meta = pod.get("metadata") or {}
        index = str((meta.get("annotations") or {}).get(INDEX_ANNOTATION, "0"))
        return (int(index) if index.isdigit() else 0, _negated(meta.get("creationTimestamp")))

    ranked = sorted(pods, key=order)
    return str(ranked[0]["metadata"]["name"]) if ranked else None


def _negated(stamp: object) -> str:
    # RFC 3339 stamps sort as text; inverting each character puts the newest first.
    return "".join(chr(0x10FFFF - ord(c)) for c in str(stamp or ""))


def _schedulable(node: Obj, tolerated: Sequence[Taint]) -> bool:
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    for taint in spec.get("taints") or ():
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(
            t.key == taint.get("key")
            and t.effect == taint.get("effect")
            and (t.value is None or t.value == taint.get("value"))
            for t in tolerated
        ):
            return False
    conditions = (node.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _allocatable(node: Obj, resource: str) -> int:
    raw = ((node.get("status") or {}).get("allocatable") or {}).get(resource, "0")
    try:
        return int(str(raw))
    except ValueError:
        return 0
