"""The README's five-minute tour, run through the real CLI against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

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


def cli(server: ServerProcess, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GPUPOOL_URL": server.url,
        "GPUPOOL_TOKEN": server.tokens[user],
        "COLUMNS": "200",
    }
    return subprocess.run(
        [sys.executable, "-m", "gpupool", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def cli_json(server: ServerProcess, user: str, *args: str) -> object:
    done = cli(server, user, args[0], "--json", *args[1:])  # before any `--` job command
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_tour(server: ServerProcess, open_dir: Path) -> None:
    assert set(server.tokens) == {"admin", "alice", "bob", "carol", "vera", "audra"}
    release = open_dir / "release"
    wait = f'while [ ! -f {release} ]; do sleep 0.05; done; echo "trained on $CUDA_VISIBLE_DEVICES"'
    ids = []
    for i in range(3):
        job = cli_json(
            server,
            "alice",
            "submit",
            "--gpus",
            "1",
            "--gpu-type",
            "h100",
            "--name",
            f"train-{i}",
            "--",
            "sh",
            "-c",
            wait,
        )
        ids.append(job["id"])  # type: ignore[index]
    bob = cli_json(server, "bob", "submit", "--gpu-type", "h100", "--", "echo", "hi from bob")

    def statuses() -> list[str]:
        page = cli_json(server, "admin", "jobs", "--all")
        by_id = {j["id"]: j["status"] for j in page["items"]}  # type: ignore[index]
        return [by_id[i] for i in (*ids, bob["id"])]  # type: ignore[index]

    wait_for(lambda: statuses() == ["running", "running", "queued", "succeeded"], what="tour state")

    why = cli(server, "alice", "why", ids[2])
    assert why.returncode == 0 and "quota" in why.stdout and "h100" in why.stdout

    table = cli(server, "alice", "jobs")
    assert "train-0" in table.stdout and "bob" not in table.stdout  # only team-a's jobs

    denied = cli(server, "alice", "logs", bob["id"])  # type: ignore[index]
    assert denied.returncode == 4 and "error:" in denied.stderr

    viewer = cli(server, "vera", "cancel", ids[0])
    assert viewer.returncode == 4

    cancelled = cli_json(server, "alice", "cancel", ids[2])
    assert cancelled["status"] == "cancelled"  # type: ignore[index]

    release.touch()
    wait_for(lambda: statuses()[:2] == ["succeeded", "succeeded"], what="jobs finish")
    logs = cli(server, "alice", "logs", ids[0])
    assert logs.returncode == 0
    assert logs.stdout.strip() in ("trained on 0", "trained on 1")  # one of alice's 2 GPUs
    followed = cli(server, "alice", "logs", "-f", ids[1])
    assert "trained on" in followed.stdout

    teams = cli_json(server, "alice", "teams")
    assert [t["name"] for t in teams] == ["team-a"]  # type: ignore[index, union-attr]
    pools = cli(server, "bob", "pools")
    assert "demo-shared-dev-h100-pool" in pools.stdout
    costs = cli_json(server, "audra", "costs")
    assert costs["currency"] == "USD" and costs["group_by"] == ["team", "gpu_type"]  # type: ignore[index]
    other = cli(server, "bob", "usage", "--team", "team-a")
    assert other.returncode == 4 and "team-a" in other.stderr

    missing = cli(server, "alice", "job", "j-000000000000")
    assert missing.returncode == 3
    no_token = subprocess.run(
        [sys.executable, "-m", "gpupool", "jobs"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "GPUPOOL_URL": server.url, "GPUPOOL_TOKEN": ""},
    )
    assert no_token.returncode == 4


def test_cli_reports_an_unreachable_server() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpupool", "jobs", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "GPUPOOL_URL": "http://127.0.0.1:9", "GPUPOOL_TOKEN": "x"},
        timeout=60,
    )
    assert done.returncode == 6 and "127.0.0.1:9" in done.stderr
