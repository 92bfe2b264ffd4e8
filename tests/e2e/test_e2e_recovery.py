"""X3: SIGKILL the server while jobs run; after a restart nothing is lost or run twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.slow

# Appends one line per run to $COUNT, then waits for $RELEASE.
RUN_ONCE = [
    "sh",
    "-c",
    'echo "$GPUPOOL_JOB_ID.$GPUPOOL_ATTEMPT" >> "$COUNT"; '
    'while [ ! -f "$RELEASE" ]; do sleep 0.05; done',
]


def test_sigkill_and_restart_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path, open_dir: Path, demo_path: Path
) -> None:
    count, release = open_dir / "count", open_dir / "release"
    server = ServerProcess(tmp_path / "home", demo_path)
    server.start()
    try:
        alice = server.client("alice")
        env = {"COUNT": str(count), "RELEASE": str(release)}
        body = {"command": RUN_ONCE, "env": env, "resources": {"gpus": 1, "gpu_types": ["h100"]}}
        ids = [alice.post("/v1/jobs", json=body).json()["id"] for _ in range(3)]

        def status(job_id: str) -> str:
            return str(alice.get(f"/v1/jobs/{job_id}").json()["status"])

        wait_for(lambda: [status(j) for j in ids[:2]] == ["running", "running"], what="2 running")
        assert status(ids[2]) == "queued"
        server.kill()
        alice.close()

        restarted = ServerProcess(tmp_path / "home", demo_path, port=server.port)
        restarted.tokens = server.tokens  # tokens live in the store and survive
        restarted.start()
        try:
            alice = restarted.client("alice")
            # Still running (re-attached through the handle), still queued: nothing lost.
            assert [status(j) for j in ids] == ["running", "running", "queued"]
            release.touch()
            wait_for(lambda: all(status(j) == "succeeded" for j in ids), what="all succeeded")
            runs = count.read_text().split()
            assert sorted(runs) == sorted(f"{j}.1" for j in ids)  # each ran exactly once
            alice.close()
        finally:
            restarted.stop()
    finally:
        server.stop()
