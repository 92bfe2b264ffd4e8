"""Processes of the local backend: launching a runner, and knowing whether one is still ours.

A pid alone is not an identity: after a crash and a long enough wait, the kernel reuses it.
A :class:`ProcessId` is ``(pid, create_time)``; a process "is" the recorded one only if both
match (create times within 10 ms, the resolution psutil reads them with) and it is not a
zombie. Every signal we send is checked that way first, so a stale handle can never signal an
unrelated process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from gpupool.backends.local.runner import RUNNER_LOG

CREATE_TIME_TOLERANCE_S = 0.01

Launcher = Callable[[Path], None]  # starts the runner for an attempt dir; returns at once


@dataclass(frozen=True, slots=True)
class ProcessId:
    pid: int
    create_time: float

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None) -> ProcessId | None:
        if not raw or "pid" not in raw or "create_time" not in raw:
            return None
        try:
            return cls(int(raw["pid"]), float(raw["create_time"]))
        except (TypeError, ValueError):
            return None


def is_alive(proc: ProcessId) -> bool:
    try:
        p = psutil.Process(proc.pid)
        if abs(p.create_time() - proc.create_time) > CREATE_TIME_TOLERANCE_S:
            return False  # the pid was reused
        return p.status() != psutil.STATUS_ZOMBIE  # dead, just not reaped by its parent yet
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


def signal_process(proc: ProcessId, sig: signal.Signals) -> bool:
    """Send ``sig`` if ``proc`` is still the recorded process; whether it was sent."""
    if not is_alive(proc):
        return False
    try:
        os.kill(proc.pid, sig)
    except ProcessLookupError:
        return False
    return True


def signal_group(leader: ProcessId, sig: signal.Signals) -> bool:
    """Send ``sig`` to the process group led by ``leader`` if the leader is still the same."""
    if not is_alive(leader):
        return False
    try:
        os.killpg(leader.pid, sig)
    except ProcessLookupError:
        return False
    return True


def launch_runner(attempt: Path, python: str = sys.executable, timeout_s: float = 10.0) -> None:
    """Start ``python -m gpupool.backends.local.runner attempt`` fully detached.

    New session (no signal for our process group or terminal reaches it); the runner forks
    and its first process exits at once, which we reap here, so the real runner is the child
    of init and never a zombie of ours.
    """
    # 0600: the runner's diagnostics are the server's, not the job's to read.
    fd = os.open(attempt / RUNNER_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with open(fd, "ab") as err:
        proc = subprocess.Popen(
            [python, "-m", "gpupool.backends.local.runner", str(attempt)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            close_fds=True,
        )
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # Stuck before forking (an overloaded machine); the adapter's wait for handle.json
        # decides. Reap it in the background so it never lingers as our zombie.
        threading.Thread(target=proc.wait, daemon=True).start()
