"""Live configuration through the real CLI and a real server: a raised quota starts a queued
job without a restart; history, refusals and confirmation as an operator sees them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path: Path, demo_path: Path) -> Iterator[ServerProcess]:
    started = ServerProcess(tmp_path / "home", demo_path)
    started.start()
    try:
        yield started
    finally:
        started.stop()


def cli(
    server: ServerProcess, user: str, *args: str, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUPOOL_URL": server.url, "GPUPOOL_TOKEN": server.tokens[user]}
    env["COLUMNS"] = "200"
    return subprocess.run(
        [sys.executable, "-m", "gpupool", *args],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=60,
    )


def test_apply_raises_a_quota_and_the_queued_job_starts_without_restart(
    server: ServerProcess, demo_path: Path, tmp_path: Path
) -> None:
    with server.client("alice") as alice:
        job = alice.post(
            "/v1/jobs", json={"command": ["true"], "resources": {"gpus": 3, "gpu_types": ["h100"]}}
        ).json()
        why = lambda: alice.get(f"/v1/jobs/{job['id']}/why").json()  # noqa: E731
        wait_for(lambda: bool(why()["reasons"]), what="the scheduler to explain the wait")
        assert alice.get(f"/v1/jobs/{job['id']}").json()["status"] == "queued"

        data = yaml.safe_load(demo_path.read_text())
        data["teams"]["team-a"]["quota"]["h100"]["nominal"] = 4
        new = tmp_path / "cluster.yaml"
        new.write_text(yaml.safe_dump(data, sort_keys=False))

        shown = cli(server, "admin", "config", "diff", str(new))
        assert shown.returncode == 0, shown.stderr
        assert "against version 1:" in shown.stdout
        assert "~ team-a quota.h100.nominal: 2 -> 4" in shown.stdout

        declined = cli(server, "admin", "config", "apply", str(new), stdin="n\n")
        assert declined.returncode == 1 and "nothing applied" in declined.stdout
        refused = cli(server, "alice", "config", "apply", str(new), "--yes")
        assert refused.returncode == 4, refused.stdout + refused.stderr

        applied = cli(server, "admin", "config", "apply", str(new), "--yes")
        assert applied.returncode == 0, applied.stderr
        assert "version 2 in force" in applied.stdout
        wait_for(
            lambda: alice.get(f"/v1/jobs/{job['id']}").json()["status"] == "succeeded",
            what="the queued job to run under the raised quota",
        )

        history = cli(server, "admin", "config", "history")
        assert history.returncode == 0, history.stderr
        lines = history.stdout
        assert "teams: ~1" in lines and "admin" in lines
        assert "first version, from server --config" in lines


def test_an_invalid_file_is_refused_with_file_and_line_and_nothing_changes(
    server: ServerProcess, demo_path: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(demo_path.read_text().replace("gpu_type: t4", "gpu_type: a100", 1))
    done = cli(server, "admin", "config", "apply", str(bad), "--yes")
    assert done.returncode == 5
    assert f"{bad}:" in done.stderr and "pools[1].gpu_type" in done.stderr
    history = cli(server, "admin", "config", "history", "--json")
    assert '"version": 2' not in history.stdout
