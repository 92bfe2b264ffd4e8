"""A real ``gpupool server`` in a subprocess, for end-to-end tests."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx

TOKEN_LINE = re.compile(r"^\s+(\S+)\s+(gpt_\S+)$")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    def __init__(
        self,
        home: Path,
        config: Path,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        preexec: Callable[[], None] | None = None,
        role: str | None = None,
        database_url: str | None = None,
    ) -> None:
        """``env``: extra environment of the server (e.g. ``GPUPOOL_*`` limits);
        ``preexec``: run in the child before it starts (e.g. to lower a resource limit);
        ``role``: ``--role`` (all, api, controller); ``database_url``: the store (default:
        SQLite in ``home``; the caller's ``GPUPOOL_DATABASE_URL`` is never inherited)."""
        self.home = home
        self.env = dict(env or {})
        self.preexec = preexec
        self.role = role
        self.database_url = database_url
        self.config = config
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tokens: dict[str, str] = {}
        self.proc: subprocess.Popen[str] | None = None
        self.log = home.parent / f"server-{self.port}.log"

    def start(self, timeout: float = 30.0) -> None:
        env = {**os.environ, **self.env, "GPUPOOL_HOME": str(self.home)}
        env.pop("GPUPOOL_DATABASE_URL", None)
        if self.database_url is not None:
            env["GPUPOOL_DATABASE_URL"] = self.database_url
        role = ["--role", self.role] if self.role is not None else []
        with self.log.open("a") as out:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gpupool",
                    "server",
                    "--config",
                    str(self.config),
                    "--port",
                    str(self.port),
                    *role,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                preexec_fn=self.preexec,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError(f"server did not start:\n{self.log.read_text()}")
        for line in self.log.read_text().splitlines():
            if match := TOKEN_LINE.match(line):
                self.tokens[match.group(1)] = match.group(2)

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as in a crash."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def client(self, user: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.tokens[user]}"}, timeout=10
        )


def wait_for(check, timeout: float = 20.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
