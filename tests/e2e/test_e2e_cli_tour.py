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


def submitted(server: ServerProcess, user: str, *args: str) -> str:
    """``gpupool submit -q ...``: the id, printed alone."""
    done = cli(server, user, "submit", "-q", *args)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_tour(server: ServerProcess, open_dir: Path) -> None:
    """The README's tour, step by step: each comment there is asserted here."""
    assert set(server.tokens) == {"admin", "alice", "bob", "carol", "vera", "audra"}
    release = open_dir / "release"
    wait = f"while [ ! -f {release} ]; do sleep 0.05; done"
    train = [
        submitted(
            server,
            "alice",
            "--gpu-type",
            "h100",
            "--name",
            f"train-{i}",
            "--",
            "sh",
            "-c",
            f'echo "training on GPU $CUDA_VISIBLE_DEVICES"; {wait}',
        )
        for i in (1, 2, 3)
    ]
    bob_train = submitted(
        server,
        "bob",
        "--gpus",
        "2",
        "--gpu-type",
        "h100",
        "--name",
        "bob-train",
        "--",
        "sh",
        "-c",
        wait,
    )

    def jobs() -> dict[str, dict[str, object]]:
        page = cli_json(server, "admin", "jobs", "--all")
        return {j["id"]: j for j in page["items"]}  # type: ignore[index]

    def statuses(*ids: str) -> list[object]:
        found = jobs()
        return [found[i]["status"] for i in ids]

    wait_for(
        lambda: statuses(*train, bob_train) == ["running", "running", "queued", "running"],
        what="alice's two h100 jobs and bob's 2-GPU one running, train-3 queued",
    )
    # h100 is full now: bob's eval job, h100 or else t4, spills over to t4.
    eval_job = submitted(
        server,
        "bob",
        "--gpu-type",
        "h100",
        "--gpu-type",
        "t4",
        "--name",
        "eval",
        "--",
        "echo",
        "hi",
    )
    wait_for(lambda: statuses(eval_job) == ["succeeded"], what="bob's eval job")
    assert jobs()[eval_job]["gpu_type"] == "t4"
    bobs = cli(server, "bob", "jobs")
    assert "demo-shared-dev-t4-pool" in bobs.stdout and "demo-shared-dev-h100-pool" in bobs.stdout

    why = cli(server, "alice", "why", train[2])
    assert why.returncode == 0 and "quota" in why.stdout and "h100" in why.stdout
    table = cli(server, "alice", "jobs")
    assert "train-1" in table.stdout and "bob-train" not in table.stdout  # only team-a's jobs
    wait_for(lambda: "training on GPU" in cli(server, "alice", "logs", train[0]).stdout, what="log")

    viewer = cli(server, "vera", "cancel", train[0])
    assert viewer.returncode == 4
    cancelling = cli_json(server, "alice", "cancel", train[0])
    assert cancelling["status"] in ("cancelling", "cancelled")  # type: ignore[index]
    wait_for(
        lambda: statuses(train[0], train[2]) == ["cancelled", "running"],
        what="train-1 cancelled and train-3 running on the freed quota",
    )

    teams = cli_json(server, "alice", "teams")
    assert [t["name"] for t in teams["items"]] == ["team-a"]  # type: ignore[index]
    pools = cli(server, "bob", "pools")
    assert "demo-shared-dev-h100-pool" in pools.stdout
    denied = cli(server, "alice", "logs", eval_job)
    assert denied.returncode == 4 and "error:" in denied.stderr

    release.touch()
    wait_for(
        lambda: statuses(train[1], train[2], bob_train) == ["succeeded"] * 3, what="jobs finish"
    )
    followed = cli(server, "alice", "logs", "-f", train[1])
    assert "training on GPU" in followed.stdout
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
    assert "missing bearer token; pass 'Authorization: Bearer <token>'" in no_token.stderr


def test_cli_reports_an_unreachable_server() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpupool", "jobs", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "GPUPOOL_URL": "http://127.0.0.1:9", "GPUPOOL_TOKEN": "x"},
        timeout=60,
    )
    assert done.returncode == 6 and "127.0.0.1:9" in done.stderr
