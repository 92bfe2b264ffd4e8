"""A job through a real ``gpupool server`` whose pool is on the Kubernetes backend, talking to
the stand-in API server (tests/support/kube_api.py): submitted, run as its user's uid, logs
read through the API, and the Job's trace in the cluster."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from support.kube_api import KubeApiServer
from support.kube_cluster import Node
from support.server import ServerProcess, wait_for

pytestmark = [
    pytest.mark.slow,
    # The stand-in's kubelet switches to the user's uid as the real one would: that needs root.
    pytest.mark.skipif(os.geteuid() != 0, reason="running a job as its user needs root"),
]


def test_a_job_runs_on_a_kubernetes_pool(tmp_path: Path, open_dir: Path, demo_path: Path) -> None:
    api = KubeApiServer(
        tmp_path / "kube", nodes=[Node("gpu-1", {"gpupool.io/gpu-type": "h100"}, gpus=4)]
    ).start()
    try:
        config = yaml.safe_load(demo_path.read_text())
        config["pools"][0].update(
            backend="kubernetes",
            options={
                "kubeconfig": str(api.kubeconfig(tmp_path / "kubeconfig")),
                "image": "busybox:1.36",
                "workdir_root": str(open_dir / "attempts"),
                "stop_grace_s": 1,
            },
        )
        path = tmp_path / "cluster.yaml"
        path.write_text(yaml.safe_dump(config))
        server = ServerProcess(tmp_path / "home", path)
        server.start()
        try:
            alice = server.client("alice")
            body = {
                "command": ["sh", "-c", 'echo "uid $(id -u) in $PWD"'],
                "resources": {"gpus": 1, "gpu_types": ["h100"]},
            }
            job_id = alice.post("/v1/jobs", json=body).json()["id"]

            def status() -> str:
                return str(alice.get(f"/v1/jobs/{job_id}").json()["status"])

            wait_for(lambda: status() in ("succeeded", "failed"), timeout=40, what="the job")
            final = status()
            logs = alice.get(f"/v1/jobs/{job_id}/logs").text
            alice.close()
        finally:
            server.stop()
    finally:
        api.stop()

    assert final == "succeeded", logs
    assert "uid 10001" in logs  # alice's
    assert f"in {open_dir / 'attempts'}/{job_id}.1/work" in logs
    [job] = api.cluster.jobs.values()
    assert job["metadata"]["namespace"] == "team-a"
    assert job["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001
    assert api.rejected == []
