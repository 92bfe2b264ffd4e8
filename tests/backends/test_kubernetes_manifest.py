"""The Job the Kubernetes adapter sends for an attempt, against golden files, and checked
against the Kubernetes OpenAPI schema.

Regenerate after an intended change with ``GPUPOOL_UPDATE_GOLDEN=1 pytest -k kubernetes_manifest``
and review the diff."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupool.backends.base import AdapterContext, JobSpec, PosixIdentity
from gpupool.backends.kubernetes.adapter import KubernetesBackend
from gpupool.data.grants.base import Grant, GrantScope, OutputTarget
from support.kube_schema import problems

GOLDEN = Path(__file__).parent / "testdata" / "kubernetes"
ROOT = "/shared/gpupool"  # what the test's temporary root reads as in the golden files


class Recorder:
    """A KubeApi that keeps what is created and answers nothing else."""

    def __init__(self) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.secrets: list[dict[str, Any]] = []

    def create_job(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append((namespace, body))
        return {**body, "metadata": {**body["metadata"], "uid": "0f0e-job-uid"}}

    def create_secret(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.secrets.append(body)
        return body

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Case:
    golden: str
    spec: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


GRANT = Grant(
    kind="s3",
    scope=GrantScope(
        team="team-a",
        user="alice",
        job_id="j-42",
        attempt=1,
        reads=("data/in",),
        writes=("results/attempt-1",),
        expires_at=datetime(2026, 12, 5, 9, 0, tzinfo=UTC),
    ),
    inputs={"data/in": "https://s3.example/data/in?X-Amz-Signature=SECRET-READ"},
    outputs={"results": OutputTarget(url="https://s3.example/results?sig=SECRET-WRITE")},
)


def spec_of(**overrides: Any) -> JobSpec:
    values: dict[str, Any] = {
        "job_id": "j-42",
        "attempt": 1,
        "team": "team-a",
        "user": "alice",
        "command": ("python", "train.py", "--lr", "0.1"),
        "pool": "pool-h100",
        "gpu_type": "h100",
        "gpus_per_node": 2,
        "cpus": 8,
        "memory_gb": 64,
        "env": {"WANDB_MODE": "offline", "CUDA_VISIBLE_DEVICES": "7"},
        "posix": PosixIdentity(uid=1001, gid=2001, groups=(3001, 2001)),
        **overrides,
    }
    return JobSpec(**values)


CASES = [
    pytest.param(
        Case(
            "job_single_node.yaml",
            spec={"max_runtime_s": 3600, "checkpoint_interval_s": 600},
            options={
                "image": "ghcr.io/acme/runner:1.4",
                "node_labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                "node_taints": [
                    {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                    {"key": "dedicated", "effect": "NoExecute"},
                ],
            },
        ),
        id="one node: GPUs, identity, deadline, labels and tolerations",
    ),
    pytest.param(
        Case(
            "job_gang_claim.yaml",
            spec={"nodes": 4, "gpus_per_node": 8, "image": "ghcr.io/acme/llm:2", "cpus": 0.5},
            options={
                "workdir_claim": "gpupool-work",
                "namespace": "gpu-{team}",
                "ttl_after_finished_s": None,
            },
        ),
        id="gang: an Indexed Job, work dir on a claim, own image, default node label",
    ),
    pytest.param(
        Case(
            "job_no_gpus_no_identity.yaml",
            spec={
                "gpus_per_node": 0,
                "posix": None,
                "memory_gb": 0.5,
                "array_id": "a-1",
                "array_index": 3,
            },
            options={
                "image": "python:3.12-slim",
                "run_without_identity": True,
                "job_name_prefix": "gp-",
            },
        ),
        id="no GPUs, the image's user, a task of an array",
    ),
    pytest.param(
        Case("job_with_grant.yaml", spec={"grant": GRANT}, options={"image": "i"}),
        id="a data grant: its variables read from the attempt's Secret",
    ),
]


def sent(
    case: Case, tmp_path: Path, recorder: Recorder | None = None
) -> tuple[str, dict[str, Any]]:
    recorder = recorder or Recorder()
    options = {"workdir_root": str(tmp_path / "root"), **case.options}
    ctx = AdapterContext("pool-h100", "h100", options, tmp_path / "state")
    backend = KubernetesBackend(ctx, client_factory=lambda *args: recorder)  # type: ignore[arg-type,return-value]
    backend._chown = False  # the test's uids need not exist on this machine
    backend.submit(spec_of(**case.spec))
    [(namespace, body)] = recorder.created
    text = yaml.safe_dump(body, sort_keys=False, width=100).replace(str(tmp_path / "root"), ROOT)
    return namespace, yaml.safe_load(text)


@pytest.mark.parametrize("case", CASES)
def test_the_job_matches_its_golden_file(case: Case, tmp_path: Path) -> None:
    _, body = sent(case, tmp_path)
    text = yaml.safe_dump(body, sort_keys=False, width=100)
    golden = GOLDEN / case.golden
    if os.environ.get("GPUPOOL_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


@pytest.mark.parametrize("case", CASES)
def test_the_job_is_valid_for_the_kubernetes_api(case: Case, tmp_path: Path) -> None:
    namespace, body = sent(case, tmp_path)
    assert problems(body, "job-batch-v1") == []
    assert body["metadata"]["namespace"] == namespace


def test_the_same_attempt_always_gives_the_same_bytes(tmp_path: Path) -> None:
    case = Case("", options={"image": "i"})
    first = sent(case, tmp_path / "a")
    second = sent(case, tmp_path / "b")
    assert first == second


def test_a_grant_is_never_in_the_job_and_its_secret_belongs_to_the_job(tmp_path: Path) -> None:
    recorder = Recorder()
    case = Case("", spec={"grant": GRANT}, options={"image": "i"})
    _, job = sent(case, tmp_path, recorder)
    [secret] = recorder.secrets

    assert "SECRET" not in yaml.safe_dump(job)
    assert secret["stringData"] == GRANT.env()
    assert secret["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": job["metadata"]["name"],
            "uid": "0f0e-job-uid",
        }
    ]
    assert problems(secret, "secret-v1") == []
