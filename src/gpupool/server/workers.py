"""API workers: one server that serves its API from several processes.

A Python process serves HTTP on one core at most (the GIL). With ``--api-workers N`` the
server starts ``N - 1`` children that serve the API from its listening socket (the kernel
hands each connection to whichever process accepts it first); the parent serves too and keeps
the controller. A child is an API replica on the same store, started once the parent has
opened, migrated and seeded it: the controller reads what a child writes from the store's
change log (``state.changes``), and a child that stores a submit, a cancel or a configuration
change writes one byte to a pipe whose reader wakes the controller at once, not at its next
cycle. On SQLite the processes take turns to write (``state.db.SqliteWriters``).

A child ends with its parent, however the parent ends (it watches its parent's pid); the
parent restarts a child that dies, after :data:`RESTART_DELAY_S`.

Run as ``python -m gpupool.server.workers``: the child's entry point. It reads its
:class:`WorkerArgs` from stdin (a pipe from the parent: the settings hold the grant key, which
must not pass through the environment or the command line).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpupool.config import Settings

log = logging.getLogger("gpupool.server.workers")

RESTART_DELAY_S = 1.0
STOP_WAIT_S = 10.0
PARENT_CHECK_S = 1.0


@dataclass(frozen=True)
class WorkerArgs:
    settings: Settings
    listen_fd: int
    wake_fd: int
    parent: int  # the server's pid: the child ends when it is gone


class ApiWorkers:
    """The parent's side: starts, restarts and stops the children; relays their wakes."""

    def __init__(
        self, settings: Settings, listener: socket.socket, wake: Callable[[], None]
    ) -> None:
        self._settings = replace(settings, role="api", api_workers=1)
        self._listener = listener
        self._wake = wake
        self._read, self._write = os.pipe()
        self._stopping = threading.Event()
        self._procs: list[subprocess.Popen[bytes]] = []
        self._threads: list[threading.Thread] = []

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    def start(self, count: int) -> None:
        self._procs = [self._spawn() for _ in range(count)]
        for target, name in ((self._relay, "wakes"), (self._watch, "watch")):
            thread = threading.Thread(target=target, name=f"gpupool-api-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        """SIGTERM every child (each finishes its requests, as uvicorn does), SIGKILL after
        :data:`STOP_WAIT_S`."""
        self._stopping.set()
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._procs:
            try:
                proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                log.warning("API worker %d did not stop in %g s: killed", proc.pid, STOP_WAIT_S)
                proc.kill()
                proc.wait()
        os.close(self._write)  # the relay reads end-of-file and ends
        for thread in self._threads:
            thread.join(timeout=STOP_WAIT_S)
        os.close(self._read)

    def _spawn(self) -> subprocess.Popen[bytes]:
        args = WorkerArgs(self._settings, self._listener.fileno(), self._write, os.getpid())
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpupool.server.workers"],
            stdin=subprocess.PIPE,
            pass_fds=(args.listen_fd, args.wake_fd),
        )
        assert proc.stdin is not None
        with proc.stdin:
            proc.stdin.write(pickle.dumps(args))
        log.info("API worker %d started", proc.pid)
        return proc

    def _relay(self) -> None:
        while data := os.read(self._read, 4096):
            for _ in data:  # one wake per stored change: the controller counts them
                self._wake()

    def _watch(self) -> None:
        while not self._stopping.wait(0.5):
            for n, proc in enumerate(self._procs):
                if proc.poll() is None:
                    continue
                log.warning(
                    "API worker %d exited (code %s): restarting it in %g s",
                    proc.pid,
                    proc.returncode,
                    RESTART_DELAY_S,
                )
                if self._stopping.wait(RESTART_DELAY_S):
                    return
                self._procs[n] = self._spawn()


class PipeWake:
    """A child's wake: one byte to the parent's relay. Never blocks and never fails a
    request: a full pipe already holds wakes enough, a closed one means the parent is gone."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        os.set_blocking(fd, False)

    def __call__(self) -> None:
        with contextlib.suppress(BlockingIOError, BrokenPipeError):
            os.write(self._fd, b"w")


def end_with_parent(parent: int) -> None:
    """SIGTERM this process (a graceful stop) once ``parent`` is no longer its parent."""

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(PARENT_CHECK_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="gpupool-parent-watch", daemon=True).start()


def main() -> None:
    from gpupool.server.serve import serve_worker

    args: WorkerArgs = pickle.loads(sys.stdin.buffer.read())
    end_with_parent(args.parent)
    listener = socket.socket(fileno=args.listen_fd)
    serve_worker(args.settings, listener, PipeWake(args.wake_fd))


if __name__ == "__main__":
    main()
