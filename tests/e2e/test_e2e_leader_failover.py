"""One active controller among several, on the real PostgreSQL, with real processes.

Two API replicas and two controllers share one store and one ``GPUPOOL_HOME`` (the local
backend's runs live there, so a new leader re-attaches to the old one's runs). A storm of
short jobs is submitted through both replicas; the leading controller is SIGKILLed
mid-storm, a third controller is started, and the new leader is SIGKILLed again. Then:

* every job acknowledged with 201 exists and ends;
* no attempt ran twice: each run appends ``<job id>.<attempt>`` to one file, and no line
  appears twice (a job may show several attempts, each once);
* no GPU was held by two runs at once: each run records its GPU type, its
  ``CUDA_VISIBLE_DEVICES`` and its start and end times, and on every device the spans do
  not overlap;
* each takeover (kill to "the other controller leads", by its ``/healthz``) took at most
  ``TAKEOVER_MAX_S``; both are printed;
* sampled every 50 ms throughout, never more than one controller says it leads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.databases import scratch_database
from support.server import ServerProcess, wait_for

pytestmark = pytest.mark.slow

JOBS = 150
TAKEOVER_MAX_S = 10.0
TERMINAL = {"succeeded", "failed", "cancelled"}

# One line per run in $RUNS; one span line per run in $SPANS (written after the sleep).
JOB = [
    "sh",
    "-c",
    'echo "$GPUPOOL_JOB_ID.$GPUPOOL_ATTEMPT" >> "$RUNS"; s=$(date +%s.%N); sleep 0.2; '
    'echo "$GPUPOOL_GPU_TYPE $CUDA_VISIBLE_DEVICES $s $(date +%s.%N)" >> "$SPANS"',
]


@pytest.fixture
def store_url() -> Iterator[str]:
    with scratch_database() as url:
        yield url


def leading(controller: ServerProcess) -> bool:
    try:
        health = httpx.get(f"{controller.url}/healthz", timeout=1).json()
    except httpx.HTTPError:
        return False
    return bool(health["controller"]["leading"])


class LeaderWatch:
    """Samples every live controller's ``/healthz`` on a thread; keeps samples where more
    than one said it leads."""

    def __init__(self, controllers: list[ServerProcess]) -> None:
        self.controllers = controllers  # the test appends the ones it starts
        self.doubled: list[list[int]] = []
        self.samples = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            live = [c for c in list(self.controllers) if c.proc and c.proc.poll() is None]
            leaders = [c.port for c in live if leading(c)]
            self.samples += 1
            if len(leaders) > 1:
                self.doubled.append(leaders)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(5)


def takeover(killed: ServerProcess, others: list[ServerProcess]) -> tuple[ServerProcess, float]:
    """SIGKILL ``killed``; the controller that leads next, and how long that took."""
    killed.kill()
    start = time.monotonic()
    while time.monotonic() - start < 3 * TAKEOVER_MAX_S:
        for other in others:
            if leading(other):
                return other, time.monotonic() - start
        time.sleep(0.05)
    raise AssertionError("no controller took over")


class Storm:
    """Submits ``JOBS`` jobs on a thread, alternating replicas and teams; keeps the 201s."""

    def __init__(self, replicas: list[ServerProcess], env: dict[str, str]) -> None:
        self.clients = [r.client(user) for r in replicas for user in ("alice", "bob")]
        self.env = env
        self.acknowledged: list[str] = []
        self.refused: list[int] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def close(self) -> None:
        for client in self.clients:
            client.close()

    def _run(self) -> None:
        body = {"command": JOB, "env": self.env, "resources": {"gpus": 1}}
        body["resources"]["gpu_types"] = ["h100", "t4"]  # type: ignore[index]
        for n in range(JOBS):
            try:
                reply = self.clients[n % len(self.clients)].post("/v1/jobs", json=body)
            except httpx.HTTPError:
                self.refused.append(-1)
                continue
            if reply.status_code == 201:
                self.acknowledged.append(reply.json()["id"])
            else:
                self.refused.append(reply.status_code)
            time.sleep(0.03)  # a storm that lasts long enough to kill two leaders in


def test_leader_sigkilled_twice_mid_storm_loses_nothing_and_runs_nothing_twice(
    tmp_path: Path, open_dir: Path, demo_path: Path, store_url: str
) -> None:
    home = tmp_path / "home"
    runs, spans = open_dir / "runs", open_dir / "spans"
    for path in (runs, spans):  # jobs of two users (two uids, as root) append to both
        path.touch()
        path.chmod(0o666)

    def process(role: str) -> ServerProcess:
        return ServerProcess(home, demo_path, role=role, database_url=store_url)

    started: list[ServerProcess] = []
    closing: list[Storm | httpx.Client] = []
    try:
        for role in ("api", "api", "controller", "controller"):
            started.append(process(role))
            started[-1].start()
        api_one, api_two, first, second = started
        api_two.tokens = api_one.tokens  # made once, by the first process, in the store
        wait_for(lambda: leading(first) or leading(second), what="a leader")
        leader, standby = (first, second) if leading(first) else (second, first)
        watch = LeaderWatch([first, second])
        storm = Storm([api_one, api_two], {"RUNS": str(runs), "SPANS": str(spans)})
        closing.append(storm)
        storm.thread.start()

        wait_for(lambda: len(storm.acknowledged) >= JOBS // 3, timeout=60, what="a third")
        leader, took_first = takeover(leader, [standby])
        started.append(process("controller"))
        started[-1].start()
        watch.controllers.append(started[-1])
        wait_for(lambda: len(storm.acknowledged) >= 2 * JOBS // 3, timeout=60, what="2/3")
        leader, took_second = takeover(leader, [started[-1]])
        print(f"\ntakeover after SIGKILL of the leader: {took_first:.2f} s, {took_second:.2f} s")
        storm.thread.join(120)
        watch.stop()
        assert watch.samples > 100 and watch.doubled == [], f"two leaders: {watch.doubled[:3]}"

        assert storm.refused == []
        assert len(storm.acknowledged) == JOBS
        reader = api_one.client("admin")
        closing.append(reader)

        def status(job_id: str) -> str:
            reply = reader.get(f"/v1/jobs/{job_id}")
            assert reply.status_code == 200, reply.text  # every acknowledged job exists
            return str(reply.json()["status"])

        pending = set(storm.acknowledged)

        def all_ended() -> bool:
            pending.difference_update({j for j in list(pending) if status(j) in TERMINAL})
            return not pending

        wait_for(all_ended, timeout=240, what="every acknowledged job to end")
        jobs = [reader.get(f"/v1/jobs/{j}").json() for j in storm.acknowledged]
        ends = Counter(job["status"] for job in jobs)
        print(f"ends: {dict(ends)}")
        failed = {job["id"]: job["message"] for job in jobs if job["status"] != "succeeded"}
        assert ends == {"succeeded": JOBS}, f"not succeeded: {list(failed.items())[:3]}"

        lines = runs.read_text().split()
        twice = [line for line, n in Counter(lines).items() if n > 1]
        assert twice == [], f"attempts that ran twice: {twice}"
        assert {line.split(".")[0] for line in lines} == set(storm.acknowledged)

        by_device: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
        for line in spans.read_text().splitlines():
            gpu_type, devices, begin, end = line.split()
            for device in devices.split(","):
                by_device[gpu_type, device].append((float(begin), float(end)))
        overlaps = [
            (device, a, b)
            for device, spans_of in by_device.items()
            for a, b in zip(sorted(spans_of), sorted(spans_of)[1:], strict=False)
            if b[0] < a[1]
        ]
        assert overlaps == [], f"GPUs held by two runs at once: {overlaps[:5]}"
        assert took_first <= TAKEOVER_MAX_S and took_second <= TAKEOVER_MAX_S
    finally:
        for closable in closing:
            closable.close()
        for proc in started:
            proc.stop()


def test_a_second_server_on_one_sqlite_store_exits_saying_why(
    tmp_path: Path, demo_path: Path
) -> None:
    first = ServerProcess(tmp_path / "home", demo_path)
    first.start()
    env = {**os.environ, "GPUPOOL_HOME": str(tmp_path / "home"), "GPUPOOL_PORT": "1"}
    env.pop("GPUPOOL_DATABASE_URL", None)  # the same SQLite store as the first
    try:
        second = subprocess.run(
            [sys.executable, "-m", "gpupool", "server", "--config", str(demo_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 5
        assert f"another gpupool server (pid {first.proc.pid})" in second.stderr  # type: ignore[union-attr]
        assert "on SQLite only one server process may run" in second.stderr
        assert httpx.get(f"{first.url}/healthz", timeout=5).json()["role"] == "all"
    finally:
        first.stop()
