"""Harnesses that let one contract suite drive every backend adapter.

A harness turns a :class:`Behaviour` (how long the job runs, its exit code, whether it traps
SIGTERM) into a ``JobSpec`` for its adapter, waits on that adapter's notion of time, and
reports what the job observed (how often it ran, its environment, whether it got SIGTERM).
Adapters that execute real commands (local; later slurm, ray) run :data:`JOB_SCRIPT`, which
writes its observations under an ``obs`` directory; the fake backend exposes them directly.
To add an adapter: write a harness and add it to ``HARNESSES``.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Protocol

import pytest

from gpupool.backends.azure_batch.adapter import AzureBatchBackend
from gpupool.backends.azure_ml.adapter import AzureMLBackend
from gpupool.backends.base import (
    FINAL_STATES,
    AdapterContext,
    Backend,
    BackendStatus,
    JobHandle,
    JobSpec,
    RunState,
)
from gpupool.backends.fake import (
    DURATION_ENV,
    EXIT_CODE_ENV,
    FakeBackend,
    FakeCluster,
)
from gpupool.backends.kubernetes.adapter import KubernetesBackend
from gpupool.backends.local.adapter import LocalBackend
from gpupool.backends.ray.adapter import RayBackend
from gpupool.backends.slurm.adapter import SlurmBackend

POOL = "test-shared-dev-t4-pool"
WAIT_S = 10.0

# The job used by real-process adapters. Observations go to $CT_OBS (one dir per key).
JOB_SCRIPT = """
import json, os, pathlib, signal, sys, time
obs = pathlib.Path(os.environ["CT_OBS"])
obs.mkdir(parents=True, exist_ok=True)
with open(obs / "runs", "a") as f:
    f.write("run\\n")
seen = {k: v for k, v in os.environ.items() if k.startswith(("GPUPOOL_", "CUDA_", "CT_"))}
seen["cwd"] = os.getcwd()
tmp = obs / f"env.{os.getpid()}.tmp"  # a gang's tasks share obs: one temporary file each
tmp.write_text(json.dumps(seen))
os.replace(tmp, obs / "env.json")
echo = os.environ.get("CT_ECHO")  # observations in the log too (remote jobs, no shared disk)
if echo:
    print("CT_ENV", json.dumps(seen), flush=True)
trap = os.environ.get("CT_TRAP", "")
def on_term(signum, frame):
    (obs / "sigterm").write_text("received")
    if echo:
        print("CT_SIGTERM", flush=True)
    if trap == "exit":
        sys.exit(143)
if trap:
    signal.signal(signal.SIGTERM, on_term)
print("hello from", os.environ["GPUPOOL_JOB_ID"] + "." + os.environ["GPUPOOL_ATTEMPT"], flush=True)
(obs / "ready").write_text("")
end = time.monotonic() + float(os.environ.get("CT_DURATION", "0"))
while time.monotonic() < end:
    time.sleep(0.02)
sys.exit(int(os.environ.get("CT_EXIT", "0")))
"""


@dataclass(frozen=True)
class Behaviour:
    """What the job does. Test modules pass these as keywords to ``Harness.spec`` (they do not
    import this module: with ``--import-mode=importlib`` a conftest is not importable)."""

    duration_s: float = 0.0
    exit_code: int = 0
    trap_term: str = ""  # "" default action; "exit": record and exit 143; "ignore": record only


class Harness(Protocol):
    name: str
    real_processes: bool
    backend: Backend

    def restart(self) -> Backend: ...
    def spec(self, job_id: str, **overrides: Any) -> JobSpec:
        """A spec for ``job_id``; ``Behaviour`` fields and ``JobSpec`` fields as keywords."""
        ...

    def wait(
        self, handle: JobHandle, until: Callable[[BackendStatus], bool] | None = None
    ) -> BackendStatus: ...
    def wait_started(self, handle: JobHandle, spec: JobSpec) -> None: ...
    def runs(self, spec: JobSpec) -> int: ...
    def env_seen(self, spec: JobSpec) -> dict[str, str]: ...
    def sigterm_seen(self, spec: JobSpec) -> bool: ...
    def cleanup(self) -> None: ...


def base_spec(job_id: str, **overrides: Any) -> JobSpec:
    spec = JobSpec(
        job_id=job_id,
        attempt=1,
        team="team-a",
        user="alice",
        command=("true",),
        pool=POOL,
        gpu_type="t4",
        gpus_per_node=0,
    )
    return replace(spec, **overrides)


def split_behaviour(overrides: dict[str, Any]) -> Behaviour:
    names = [f.name for f in fields(Behaviour)]
    return Behaviour(**{n: overrides.pop(n) for n in names if n in overrides})


def is_final(status: BackendStatus) -> bool:
    return status.state in FINAL_STATES


class LocalHarness:
    name = "local"
    real_processes = True

    def __init__(self, tmp_path: Path, options: dict[str, Any] | None = None) -> None:
        self.obs = tmp_path / "obs"
        self.ctx = AdapterContext(
            pool=POOL,
            gpu_type="t4",
            # Jobs without a POSIX identity: as root they then run as the server's user.
            options={"max_runtime_grace_s": 1, "run_without_identity": True, **(options or {})},
            state_dir=tmp_path / "state",
            gpus_per_node=4,
        )
        self.backend = LocalBackend(self.ctx)

    def restart(self) -> Backend:
        self.backend = LocalBackend(self.ctx)
        return self.backend

    def spec(self, job_id: str, **overrides: Any) -> JobSpec:
        behaviour = split_behaviour(overrides)
        key = f"{job_id}.{overrides.get('attempt', 1)}"
        env = {
            "CT_OBS": str(self.obs / key),
            "CT_DURATION": str(behaviour.duration_s),
            "CT_EXIT": str(behaviour.exit_code),
            "CT_TRAP": behaviour.trap_term,
            **overrides.pop("env", {}),
        }
        return base_spec(job_id, command=(sys.executable, "-c", JOB_SCRIPT), env=env, **overrides)

    def wait(
        self, handle: JobHandle, until: Callable[[BackendStatus], bool] | None = None
    ) -> BackendStatus:
        until = until or is_final
        deadline = time.monotonic() + WAIT_S
        while True:
            status = self.backend.poll([handle])[handle.key]
            if until(status):
                return status
            if time.monotonic() > deadline:
                pytest.fail(f"{handle.key} still {status} after {WAIT_S}s")
            time.sleep(0.05)

    def wait_started(self, handle: JobHandle, spec: JobSpec) -> None:
        ready = Path(spec.env["CT_OBS"]) / "ready"
        deadline = time.monotonic() + WAIT_S
        while not ready.exists():
            if time.monotonic() > deadline:
                pytest.fail(f"{spec.key} did not start within {WAIT_S}s")
            time.sleep(0.02)

    def runs(self, spec: JobSpec) -> int:
        path = Path(spec.env["CT_OBS"]) / "runs"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def env_seen(self, spec: JobSpec) -> dict[str, str]:
        return json.loads((Path(spec.env["CT_OBS"]) / "env.json").read_text())

    def sigterm_seen(self, spec: JobSpec) -> bool:
        return (Path(spec.env["CT_OBS"]) / "sigterm").exists()

    def cleanup(self) -> None:
        """Stop whatever a failed test left running (runners outlive the test process)."""
        root = Path(self.ctx.state_dir) / "local" / POOL
        for attempt in root.iterdir() if root.is_dir() else ():
            handle = JobHandle("local", POOL, "", attempt.name, {"dir": str(attempt)})
            self.backend.cancel(handle, 0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class FakeHarness:
    name = "fake"
    real_processes = False

    def __init__(self, tmp_path: Path) -> None:
        self.clock = FakeClock()
        self.cluster = FakeCluster(self.clock)
        self.ctx = AdapterContext(pool=POOL, gpu_type="t4", state_dir=tmp_path, gpus_per_node=4)
        self.backend = FakeBackend(self.ctx, cluster=self.cluster)

    def restart(self) -> Backend:
        self.backend = FakeBackend(self.ctx, cluster=self.cluster)
        return self.backend

    def spec(self, job_id: str, **overrides: Any) -> JobSpec:
        behaviour = split_behaviour(overrides)
        env = {
            DURATION_ENV: str(behaviour.duration_s),
            EXIT_CODE_ENV: str(behaviour.exit_code),
            **overrides.pop("env", {}),
        }
        return base_spec(job_id, env=env, **overrides)

    def wait(
        self, handle: JobHandle, until: Callable[[BackendStatus], bool] | None = None
    ) -> BackendStatus:
        until = until or is_final
        for _ in range(int(WAIT_S / 0.05)):
            status = self.backend.poll([handle])[handle.key]
            if until(status):
                return status
            self.clock.advance(0.05)
        pytest.fail(f"{handle.key} still {status} after {WAIT_S}s of fake time")

    def wait_started(self, handle: JobHandle, spec: JobSpec) -> None:
        self.wait(handle, lambda s: s.state != RunState.PENDING)

    def runs(self, spec: JobSpec) -> int:
        return 1 if self.cluster.run(spec.key) is not None else 0

    def env_seen(self, spec: JobSpec) -> dict[str, str]:
        run = self.cluster.run(spec.key)
        assert run is not None
        return dict(run.env)

    def sigterm_seen(self, spec: JobSpec) -> bool:
        run = self.cluster.run(spec.key)
        return run is not None and "SIGTERM" in run.signals

    def cleanup(self) -> None:
        pass


@functools.cache
def ray_address() -> str:
    """A real Ray cluster for the session: $GPUPOOL_TEST_RAY_ADDRESS, else the one that
    scripts/ray/up.sh starts (or finds) on this machine. Skips when there is none."""
    if address := os.environ.get("GPUPOOL_TEST_RAY_ADDRESS"):
        return address
    up = Path(__file__).resolve().parents[2] / "scripts" / "ray" / "up.sh"
    try:
        subprocess.run([str(up)], check=True, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        pytest.skip(f"no Ray cluster (run scripts/ray/up.sh): {str(detail).strip()[-300:]}")
    return "http://127.0.0.1:8265"


class RayHarness(LocalHarness):
    """The local harness's job and observations, run as Ray Jobs on a real local cluster.
    Submission ids get a per-test prefix: the cluster remembers ids across test sessions."""

    name = "ray"
    backend_chooses_devices = True  # Ray assigns the GPUs (and sets CUDA_VISIBLE_DEVICES)

    def __init__(self, tmp_path: Path) -> None:
        self.obs = tmp_path / "obs"
        options = {
            "address": ray_address(),
            "stop_grace_s": 2,
            "submission_id_prefix": f"ct-{uuid.uuid4().hex[:8]}-",
        }
        self.ctx = AdapterContext(
            pool=POOL, gpu_type="t4", options=options, state_dir=tmp_path / "state"
        )
        self.backend = RayBackend(self.ctx)

    def restart(self) -> Backend:
        self.backend = RayBackend(self.ctx)
        return self.backend

    def wait(
        self, handle: JobHandle, until: Callable[[BackendStatus], bool] | None = None
    ) -> BackendStatus:
        until = until or is_final
        deadline = time.monotonic() + 3 * WAIT_S  # each job starts a supervisor actor: slow
        while not until(status := self.backend.poll([handle])[handle.key]):
            if time.monotonic() > deadline:
                pytest.fail(f"{handle.key} still {status} after {3 * WAIT_S}s")
            time.sleep(0.05)
        return status

    def cleanup(self) -> None:
        """Stop what a test left running: every key submitted has a dir under the root."""
        root = self.backend.root  # type: ignore[attr-defined]
        for attempt in root.iterdir() if root.is_dir() else ():
            self.backend.cancel(JobHandle("ray", POOL, "", attempt.name), 0)


@functools.cache
def slurm_cluster_problem() -> str | None:
    """Start (or find) the real Slurm cluster of scripts/slurm/up.sh, once per session; why
    there is none, if so (cached: a missing cluster must not cost every test a retry)."""
    how = "run scripts/slurm/up.sh as root (installs slurm-wlm and munge)"
    if os.geteuid() != 0:
        try:
            up = subprocess.run(["sinfo", "-h", "-p", "t4", "-o", "%a"], capture_output=True)
        except OSError:
            return f"no Slurm cluster: {how}"
        return None if up.stdout.strip() == b"up" else f"no Slurm cluster: {how}"
    script = Path(__file__).resolve().parents[2] / "scripts" / "slurm" / "up.sh"
    try:
        subprocess.run([str(script)], check=True, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", "") or exc
        return f"no Slurm cluster ({how}): {str(detail).strip()[-300:]}"
    return None


class SlurmHarness(LocalHarness):
    """The local harness's job and observations, run as batch jobs of the real cluster of
    scripts/slurm/up.sh (partition t4, two nodes of gpu:h100:2,gpu:t4:2 fake GPUs)."""

    name = "slurm"
    backend_chooses_devices = True  # Slurm picks the GPUs of a gres request, not gpupool

    def __init__(self, tmp_path: Path) -> None:
        if problem := slurm_cluster_problem():
            pytest.skip(problem)
        self.obs = tmp_path / "obs"
        # The cluster remembers ended jobs (MinJobAge) by name: names get a per-test prefix.
        options = {
            "partition": "t4",
            "max_runtime_grace_s": 1,
            "job_name_prefix": f"ct-{uuid.uuid4().hex[:8]}-",
        }
        self.ctx = AdapterContext(
            pool=POOL, gpu_type="t4", options=options, state_dir=tmp_path / "state"
        )
        self.backend = SlurmBackend(self.ctx)

    def restart(self) -> Backend:
        self.backend = SlurmBackend(self.ctx)
        return self.backend

    def wait(
        self, handle: JobHandle, until: Callable[[BackendStatus], bool] | None = None
    ) -> BackendStatus:
        until = until or is_final
        deadline = time.monotonic() + 3 * WAIT_S  # a loaded 2-core machine schedules slowly
        while not until(status := self.backend.poll([handle])[handle.key]):
            if time.monotonic() > deadline:
                pytest.fail(f"{handle.key} still {status} after {3 * WAIT_S}s")
            time.sleep(0.1)
        return status

    def cleanup(self) -> None:
        """Cancel whatever a test left in the queue: every job submitted is recorded."""
        root = self.backend.root  # type: ignore[attr-defined]
        records = root.glob("*/submitted.json") if root.is_dir() else ()
        job_ids = [json.loads(r.read_text())["job_id"] for r in records]
        if job_ids:
            subprocess.run(["scancel", *job_ids], capture_output=True)


class AzureBatchHarness(LocalHarness):
    """The local harness's job and observations, run as tasks by the real ``azure-batch`` SDK
    against the local stand-in of tests/support/azure_batch.py (there is no Azure here). Every
    request the adapter makes is checked there; any it rejected fails the test."""

    name = "azure-batch"

    def __init__(self, tmp_path: Path) -> None:
        from support.azure_batch import ACCOUNT, ACCOUNT_KEY, BatchStandIn

        self.obs = tmp_path / "obs"
        self.stand_in = BatchStandIn(tmp_path / "nodes").__enter__()
        self.environ = {"GPUPOOL_TEST_BATCH_KEY": ACCOUNT_KEY}
        options = {
            "account_url": self.stand_in.url,
            "auth": "shared-key",
            "account_name": ACCOUNT,
            "account_key_env": "GPUPOOL_TEST_BATCH_KEY",
            "request_timeout_s": 5,
        }
        self.ctx = AdapterContext(
            pool=POOL, gpu_type="t4", options=options, state_dir=tmp_path / "state"
        )
        self.backend = AzureBatchBackend(self.ctx, environ=self.environ)

    def restart(self) -> Backend:
        self.backend.close()  # type: ignore[attr-defined]
        self.backend = AzureBatchBackend(self.ctx, environ=self.environ)
        return self.backend

    def cleanup(self) -> None:
        self.backend.close()  # type: ignore[attr-defined]
        self.stand_in.close()  # kills what a test left running
        assert self.stand_in.rejected == [], self.stand_in.rejected


class StaticToken:
    """A credential with a fixed bearer token (the Azure ML stand-in's)."""

    def __init__(self, token: str) -> None:
        self.token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken(self.token, int(time.time()) + 3600)

    def get_token_info(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessTokenInfo

        return AccessTokenInfo(self.token, int(time.time()) + 3600)


class AzureMLHarness(LocalHarness):
    """The local harness's job and observations, run as command jobs by the real
    ``azure-ai-ml`` SDK against the HTTPS stand-in of tests/support/azure_ml.py. Every request
    is checked there; any it rejected fails the test. The SDK trusts the stand-in's
    certificate through REQUESTS_CA_BUNDLE, set for the harness's lifetime."""

    name = "azure-ml"

    def __init__(self, tmp_path: Path) -> None:
        from support.azure_ml import GROUP, SUBSCRIPTION, TOKEN, WORKSPACE, AzureMLStandIn

        self.obs = tmp_path / "obs"
        self.stand_in = AzureMLStandIn(tmp_path / "aml").__enter__()
        names = ("REQUESTS_CA_BUNDLE", "AZUREML_CURRENT_CLOUD")
        self._saved_env = {name: os.environ.get(name) for name in names}
        os.environ["REQUESTS_CA_BUNDLE"] = str(self.stand_in.cert)
        options = {
            "subscription_id": SUBSCRIPTION,
            "resource_group": GROUP,
            "workspace": WORKSPACE,
            "compute": "gpu-cluster",
            "environment": "azureml:gpupool-test:1",
            "arm_endpoint": self.stand_in.arm_endpoint,
            "request_timeout_s": 5,
        }
        self.ctx = AdapterContext(
            pool=POOL, gpu_type="t4", options=options, state_dir=tmp_path / "state"
        )
        self.credential = StaticToken(TOKEN)
        self.backend = self._build()

    def _build(self) -> Backend:
        return AzureMLBackend(self.ctx, credential_factory=lambda: self.credential)

    def restart(self) -> Backend:
        self.backend = self._build()
        return self.backend

    def cleanup(self) -> None:
        self.stand_in.close()
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        assert self.stand_in.rejected == [], self.stand_in.rejected


# Real Azure (make test-azure): how long a job may take to start and end there.
AZURE_WAIT_S = float(os.environ.get("GPUPOOL_TEST_AZURE_WAIT_S", "900"))


class RemoteJobs:
    """Observations of jobs that run on another machine: the job's ``CT_OBS`` is relative (a
    dir below its work dir, on the node) and ``observed`` reads a file of it back through the
    service; ``wait`` allows ``wait_s``. Mixed into a harness before ``LocalHarness``."""

    wait_s = WAIT_S
    python = "python3"  # on the node
    backend: Backend

    def observed(self, spec: JobSpec, name: str) -> bytes | None:
        raise NotImplementedError

    def spec(self, job_id: str, **overrides: Any) -> JobSpec:
        behaviour = split_behaviour(overrides)
        key = f"{job_id}.{overrides.get('attempt', 1)}"
        env = {
            "CT_OBS": f"obs/{key}",
            "CT_DURATION": str(behaviour.duration_s),
            "CT_EXIT": str(behaviour.exit_code),
            "CT_TRAP": behaviour.trap_term,
            "CT_ECHO": "1",
            **overrides.pop("env", {}),
        }
        return base_spec(job_id, command=(self.python, "-c", JOB_SCRIPT), env=env, **overrides)

    def wait(
        self, handle: JobHandle, until: Callable[[BackendStatus], bool] | None = None
    ) -> BackendStatus:
        until = until or is_final
        deadline = time.monotonic() + self.wait_s
        while not until(status := self.backend.poll([handle])[handle.key]):
            if time.monotonic() > deadline:
                pytest.fail(f"{handle.key} still {status} after {self.wait_s}s")
            time.sleep(min(2.0, self.wait_s / 100))
        return status

    def wait_started(self, handle: JobHandle, spec: JobSpec) -> None:
        deadline = time.monotonic() + self.wait_s
        while self.observed(spec, "ready") is None:
            if time.monotonic() > deadline:
                pytest.fail(f"{spec.key} did not start within {self.wait_s}s")
            time.sleep(min(2.0, self.wait_s / 100))

    def runs(self, spec: JobSpec) -> int:
        data = self.observed(spec, "runs")
        return len(data.decode().splitlines()) if data is not None else 0

    def env_seen(self, spec: JobSpec) -> dict[str, str]:
        data = self.observed(spec, "env.json")
        assert data is not None, f"{spec.key} left no env.json"
        return dict(json.loads(data))

    def sigterm_seen(self, spec: JobSpec) -> bool:
        return self.observed(spec, "sigterm") is not None


class AzureBatchRemoteHarness(RemoteJobs, AzureBatchHarness):
    """The contract as ``make test-azure`` runs it on a real Batch account: the job's
    observations are read back through Batch's task files API (``wd/work/obs/...``), not from
    a shared disk. Without ``real`` it runs against the stand-in, which serves those files too,
    so that this path is tested here. Real: ``GPUPOOL_TEST_AZURE_BATCH_URL`` (the account) and
    ``GPUPOOL_TEST_AZURE_BATCH_POOL`` (a Batch pool whose nodes have python3), Entra ID auth."""

    real_processes = False

    def __init__(self, tmp_path: Path, real: bool = False) -> None:
        if not real:
            AzureBatchHarness.__init__(self, tmp_path)
            self.ctx = replace(self.ctx, options={**self.ctx.options, "task_id_prefix": "r-"})
            self.backend = AzureBatchBackend(self.ctx, environ=self.environ)
            self.python = sys.executable
            return
        url = os.environ.get("GPUPOOL_TEST_AZURE_BATCH_URL")
        batch_pool = os.environ.get("GPUPOOL_TEST_AZURE_BATCH_POOL")
        if not (url and batch_pool):
            pytest.skip("set GPUPOOL_TEST_AZURE_BATCH_URL and GPUPOOL_TEST_AZURE_BATCH_POOL")
        self.stand_in = None
        self.wait_s = AZURE_WAIT_S
        self.environ = dict(os.environ)
        options = {
            "account_url": url,
            "batch_pool_id": batch_pool,
            "job_id": os.environ.get("GPUPOOL_TEST_AZURE_BATCH_JOB", "gpupool-contract"),
            "task_id_prefix": f"ct{uuid.uuid4().hex[:6]}-",  # tasks outlive a test run
        }
        self.ctx = AdapterContext(pool=POOL, gpu_type="t4", options=options, state_dir=tmp_path)
        self.backend = AzureBatchBackend(self.ctx, environ=self.environ)

    def observed(self, spec: JobSpec, name: str) -> bytes | None:
        from gpupool.backends.azure_batch.errors import is_not_found
        from gpupool.backends.azure_batch.task import task_id

        backend = self.backend
        assert isinstance(backend, AzureBatchBackend)
        task = task_id(spec.key, backend.options.task_id_prefix)
        path = f"wd/work/{spec.env['CT_OBS']}/{name}"
        try:
            return b"".join(backend._batch().download_task_file(backend.job_id, task, path))
        except Exception as exc:
            if is_not_found(exc):
                return None
            raise

    def cleanup(self) -> None:
        if self.stand_in is not None:
            AzureBatchHarness.cleanup(self)


class AzureMLRemoteHarness(RemoteJobs, AzureMLHarness):
    """The contract as ``make test-azure`` runs it on a real Azure ML workspace: observations
    are read from the job's log (the job echoes them), as no file of the compute can be read
    back. Without ``real`` it runs against the stand-in, so that this path is tested here.
    Real: ``GPUPOOL_TEST_AZURE_ML_{SUBSCRIPTION,RESOURCE_GROUP,WORKSPACE,COMPUTE,ENVIRONMENT}``
    and Entra ID auth."""

    python = "python"
    real_processes = False

    def __init__(self, tmp_path: Path, real: bool = False) -> None:
        self.stand_in = None
        if not real:
            AzureMLHarness.__init__(self, tmp_path)
            self.ctx = replace(self.ctx, options={**self.ctx.options, "job_name_prefix": "r-"})
            self.backend = self._build()
            self.python = sys.executable
            return
        names = ("SUBSCRIPTION", "RESOURCE_GROUP", "WORKSPACE", "COMPUTE", "ENVIRONMENT")
        values = {n: os.environ.get(f"GPUPOOL_TEST_AZURE_ML_{n}", "") for n in names}
        if not all(values.values()):
            pytest.skip(f"set GPUPOOL_TEST_AZURE_ML_{{{','.join(names)}}}")
        self.wait_s = AZURE_WAIT_S
        options = {
            "subscription_id": values["SUBSCRIPTION"],
            "resource_group": values["RESOURCE_GROUP"],
            "workspace": values["WORKSPACE"],
            "compute": values["COMPUTE"],
            "environment": values["ENVIRONMENT"],
            "job_name_prefix": f"ct{uuid.uuid4().hex[:6]}-",
        }
        self.ctx = AdapterContext(pool=POOL, gpu_type="t4", options=options, state_dir=tmp_path)
        self.backend = AzureMLBackend(self.ctx)

    def _build(self) -> Backend:
        if self.stand_in is None:
            return AzureMLBackend(self.ctx)
        return AzureMLBackend(self.ctx, credential_factory=lambda: self.credential)

    def observed(self, spec: JobSpec, name: str) -> bytes | None:
        from gpupool.backends.azure_ml.job import job_name

        backend = self.backend
        assert isinstance(backend, AzureMLBackend)
        key_name = job_name(spec.key, backend.options.job_name_prefix)
        handle = JobHandle("azure-ml", POOL, key_name, spec.key)
        log, offset = b"", 0
        while True:
            chunk = backend.logs(handle, offset)
            log, offset = log + chunk.data, chunk.next_offset
            if not chunk.data:
                break
        lines = log.decode(errors="replace").splitlines()
        hello = f"hello from {spec.key}"
        found = {
            "ready": [line for line in lines if line.startswith(hello)],
            "runs": [line for line in lines if line.startswith(hello)],
            "sigterm": [line for line in lines if line == "CT_SIGTERM"],
            "env.json": [line[len("CT_ENV ") :] for line in lines if line.startswith("CT_ENV ")],
        }[name]
        if not found:
            return None
        return found[-1].encode() if name == "env.json" else "\n".join(found).encode()

    def cleanup(self) -> None:
        if self.stand_in is not None:
            AzureMLHarness.cleanup(self)


def kube_stand_in(tmp_path: Path, **kwargs: Any) -> Any:
    """The stand-in API server (tests/support/kube_api.py) with two nodes of 4 t4 GPUs each,
    started; the caller stops it."""
    from support.kube_api import KubeApiServer
    from support.kube_cluster import Node

    nodes = [Node(f"node-{i}", {"gpupool.io/gpu-type": "t4"}, gpus=4) for i in (1, 2)]
    return KubeApiServer(tmp_path / "kube", nodes=nodes, **kwargs).start()


class KubernetesHarness(LocalHarness):
    """The local harness's job and observations, run as Jobs of the in-process stand-in API
    server (no real cluster can be installed here): the official client speaks HTTP to it, and
    its kubelet runs each pod's command as a process on this machine."""

    name = "kubernetes"
    backend_chooses_devices = True  # the device plugin picks; the container sees 0..n-1

    def __init__(self, tmp_path: Path) -> None:
        self.obs = tmp_path / "obs"
        self.api = kube_stand_in(tmp_path)
        options = {
            "kubeconfig": str(self.api.kubeconfig(tmp_path / "kubeconfig")),
            "image": "python:3.12-slim",  # not pulled by the stand-in
            "run_without_identity": True,  # like the other harnesses' jobs: no uid/gid
            "stop_grace_s": 2,
        }
        self.ctx = AdapterContext(
            pool=POOL, gpu_type="t4", options=options, state_dir=tmp_path / "state"
        )
        self.backend = KubernetesBackend(self.ctx)

    def restart(self) -> Backend:
        self.backend = KubernetesBackend(self.ctx)
        return self.backend

    def cleanup(self) -> None:
        """Stop the stand-in (it kills what still runs); no request may have been refused."""
        self.api.stop()
        assert not self.api.rejected, self.api.rejected


# Harnesses whose first test starts a real cluster (scripts/*/up.sh, minutes on a busy machine).
CLUSTER_HARNESSES = frozenset({"slurm", "ray"})
CLUSTER_TIMEOUT_S = 900


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give a test of a cluster harness the time its cluster's start may take: the start runs
    in the first such test's setup, and the module's 60 s timeout would cut it half done."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        harness = callspec.params.get("harness") if callspec is not None else None
        names = set(getattr(item, "fixturenames", ()))
        if harness in CLUSTER_HARNESSES or names & CLUSTER_HARNESSES:
            item.add_marker(pytest.mark.timeout(CLUSTER_TIMEOUT_S))


HARNESSES: dict[str, Callable[[Path], Harness]] = {
    "local": LocalHarness,
    "fake": FakeHarness,
    "slurm": SlurmHarness,
    "ray": RayHarness,
    "azure-batch": AzureBatchHarness,
    "azure-ml": AzureMLHarness,
    "azure-batch-remote": AzureBatchRemoteHarness,
    "azure-ml-remote": AzureMLRemoteHarness,
    "kubernetes": KubernetesHarness,
}
if os.environ.get("GPUPOOL_TEST_AZURE"):  # make test-azure: the contract on real Azure
    HARNESSES["azure-batch-real"] = functools.partial(AzureBatchRemoteHarness, real=True)
    HARNESSES["azure-ml-real"] = functools.partial(AzureMLRemoteHarness, real=True)


@pytest.fixture(params=sorted(HARNESSES))
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    made = HARNESSES[request.param](tmp_path)
    yield made
    made.cleanup()


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalHarness]:
    made = LocalHarness(tmp_path)
    yield made
    made.cleanup()


@pytest.fixture
def slurm(tmp_path: Path) -> Iterator[SlurmHarness]:
    made = SlurmHarness(tmp_path)
    yield made
    made.cleanup()
