"""The database goes away under load and comes back: nothing crashes, nothing acknowledged
is lost.

A private PostgreSQL (``initdb`` into a temporary directory, ``pg_ctl start`` on a free port;
never the machine's shared one) serves a real ``gpupool server``. Client threads submit jobs;
PostgreSQL is stopped with ``pg_ctl stop -m immediate`` (as a crash) for ``OUTAGE_S`` and
started again. Then:

* during the outage the API answered 503 ``unavailable`` with ``Retry-After``, never 500,
  and no body held a traceback;
* the server process is still alive, and every job acknowledged with 201 exists;
* the API and the controller resumed: a job submitted afterwards runs to the end.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from support.server import ServerProcess, free_port, wait_for

pytestmark = pytest.mark.slow

OUTAGE_S = 3.0
THREADS = 3
TERMINAL = {"succeeded", "failed", "cancelled"}
HOW_TO_GET = (
    "needs PostgreSQL's server binaries (initdb, pg_ctl in /usr/lib/postgresql/*/bin: "
    "apt-get install postgresql) and, when run as root, a 'postgres' user to run them as"
)
BODY = {"command": ["true"], "resources": {"gpus": 1, "gpu_types": ["h100", "t4"]}}


class PrivatePostgres:
    """A PostgreSQL cluster of this test's own, in a temporary directory."""

    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not found:
            pytest.skip(HOW_TO_GET)
        self.bin = Path(found[-1]).parent
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb refuses root
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip(HOW_TO_GET)
            if shutil.which("runuser") is None:
                pytest.skip(HOW_TO_GET)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.dir = Path(tempfile.mkdtemp(prefix="gpupool-pg-"))
        if self.as_user:
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust",
            "--no-sync",
        )  # fmt: skip

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir}"
        self._run(
            str(self.bin / "pg_ctl"), "start", "-w", "-D", str(self.data), "-o", options,
            "-l", str(self.dir / "postgres.log"),
        )  # fmt: skip

    def crash(self) -> None:
        """Stop at once, as a crash: clients' connections are cut mid-request."""
        self._run(str(self.bin / "pg_ctl"), "stop", "-m", "immediate", "-D", str(self.data))

    def remove(self) -> None:
        subprocess.run(
            [*self.as_user, str(self.bin / "pg_ctl"), "stop", "-m", "immediate", "-D",
             str(self.data)],
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed: pip install 'gpupool[postgres]'")
    cluster = PrivatePostgres()
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


@dataclass
class Load:
    """Submits from ``THREADS`` threads until stopped; keeps every answer that is not 201."""

    clients: list[httpx.Client]
    acknowledged: list[str] = field(default_factory=list)
    refused: list[tuple[int, str, str | None]] = field(default_factory=list)
    transport_errors: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> list[threading.Thread]:
        threads = [threading.Thread(target=self._run, args=(c,), daemon=True) for c in self.clients]
        for thread in threads:
            thread.start()
        return threads

    def _run(self, client: httpx.Client) -> None:
        while not self.stop.is_set():
            try:
                reply = client.post("/v1/jobs", json=BODY)
            except httpx.HTTPError:
                self.transport_errors += 1
                continue
            if reply.status_code == 201:
                self.acknowledged.append(reply.json()["id"])
            else:
                self.refused.append(
                    (reply.status_code, reply.text, reply.headers.get("Retry-After"))
                )
            time.sleep(0.02)


def test_database_crash_under_load_is_503_then_resumes_losing_nothing(
    tmp_path: Path, demo_path: Path, postgres: PrivatePostgres
) -> None:
    server = ServerProcess(tmp_path / "home", demo_path, database_url=postgres.url)
    load = Load([])
    try:
        server.start()
        load.clients = [server.client(user) for user in ("alice", "bob", "alice")][:THREADS]
        threads = load.start()
        wait_for(lambda: len(load.acknowledged) >= 10, timeout=20, what="submits before")

        postgres.crash()
        crashed_at = time.monotonic()
        before = len(load.acknowledged)
        wait_for(lambda: len(load.refused) >= 3, timeout=10, what="refusals in the outage")
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - crashed_at)))
        postgres.start()
        print(f"\noutage: {time.monotonic() - crashed_at:.1f} s")

        wait_for(lambda: len(load.acknowledged) >= before + 10, timeout=30, what="submits after")
        load.stop.set()
        for thread in threads:
            thread.join(15)

        assert server.proc is not None and server.proc.poll() is None, "the server died"
        statuses = sorted({status for status, _, _ in load.refused})
        print(f"acknowledged {len(load.acknowledged)}, refused {len(load.refused)}: {statuses}")
        assert statuses == [503], load.refused[:3]
        for _, text, retry_after in load.refused:
            assert retry_after is not None and float(retry_after) > 0
            assert "Traceback" not in text and "INSERT" not in text
            assert httpx.Response(503, text=text).json()["error"]["code"] == "unavailable"
        assert load.transport_errors == 0

        reader = server.client("admin")
        load.clients.append(reader)
        for job_id in load.acknowledged:  # every acknowledged write survived the crash
            reply = reader.get(f"/v1/jobs/{job_id}")
            assert reply.status_code == 200, f"{job_id}: {reply.status_code} {reply.text}"

        after = load.clients[0].post("/v1/jobs", json=BODY)
        assert after.status_code == 201, after.text
        job_id = after.json()["id"]

        def ended() -> bool:
            return str(reader.get(f"/v1/jobs/{job_id}").json()["status"]) in TERMINAL

        wait_for(ended, timeout=30, what="a job submitted after the outage to end")
        assert reader.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"
        log = server.log.read_text()
        print(f"server log: {log.count('Traceback')} traceback(s)")
        print("\n".join(line for line in log.splitlines() if "paus" in line or "resum" in line))
        assert log.count("controller paused") <= 1, "the pause is reported once"
    finally:
        load.stop.set()
        for client in load.clients:
            client.close()
        server.stop()
