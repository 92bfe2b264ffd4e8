"""Starts runners fast: a helper process with the runner already imported forks one per attempt.

Starting ``python -m gpupool.backends.local.runner`` costs an interpreter start and the
runner's imports (tens of ms), paid by every job before it runs, and the server forks a large
process to do it. The helper pays that once: it is started (detached, in a session of its own)
by the first launch of a server, listens on a Unix socket and, for each attempt dir it is
sent, forks twice (the runner is a child of init in a new session, exactly as
:func:`~gpupool.backends.local.process.launch_runner` leaves it) and runs
:class:`~gpupool.backends.local.runner.Runner` there.

Invariants:

* **Only the server's uid talks to it, both ways.** The socket is in the abstract namespace
  (no path-length limit, nothing left on disk); the helper refuses a peer whose uid
  (``SO_PEERCRED``) is not its own, and the adapter refuses a helper whose uid is not its own
  (someone else holding the name), falling back to ``launch_runner``.
* **At most one runner per request.** The adapter falls back to ``launch_runner`` only when
  the request was never delivered (no helper to connect to); once it is sent, a lost answer
  is not retried (the attempt's ``handle.json`` decides, as for a runner that starts late).
* **Jobs outlive it and the server.** Runners are detached; the helper can die at any time
  (the next launch starts a new one). It exits after ``IDLE_EXIT_S`` without a request, or
  when the state dir it serves is gone. Its name carries the state dir and the runner's code
  (file sizes and times), so a server upgraded in place never gets an old helper's runner.

Only the stdlib and the runner's modules are imported here.
"""

from __future__ import annotations

import contextlib
import ctypes  # noqa: F401  (pre-imported: every runner's set_subreaper needs it)
import hashlib
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from gpupool.backends.local import contain, runner

IDLE_EXIT_S = 60.0  # a restart costs one interpreter start (~50 ms), once
CHECK_S = 1.0  # how often an idle helper looks whether it should exit
REPLY_TIMEOUT_S = 10.0
_MAX_REQUEST = 4096
_CRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
_start_lock = threading.Lock()


def address(local_dir: Path) -> str:
    """The name (abstract: the socket address is a NUL byte and this) of the helper serving
    ``local_dir`` with this code."""
    parts = [sys.executable, str(local_dir.absolute())]
    for module in (runner, contain, sys.modules[__name__]):
        info = os.stat(module.__file__ or "")
        parts.append(f"{module.__name__}:{info.st_size}:{info.st_mtime_ns}")
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]
    return f"gpupool-runner-spawner-{digest}"


def _peer_uid(sock: socket.socket) -> int:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CRED.size)
    return int(_CRED.unpack(raw)[1])


class Spawner:
    """The adapter's launcher: through the helper of ``local_dir``, else ``fallback``."""

    def __init__(
        self,
        local_dir: Path,
        fallback: Callable[[Path], None],
        python: str = sys.executable,
    ) -> None:
        self.local_dir = local_dir
        self.fallback = fallback
        self.python = python
        self.available = hasattr(socket, "SO_PEERCRED") and sys.platform.startswith("linux")

    def __call__(self, attempt: Path) -> None:
        if not self.available:
            self.fallback(attempt)
            return
        name = address(self.local_dir)
        sock = self._connect(name)
        if sock is None:
            with _start_lock:  # one helper start per process at a time; others then connect
                sock = self._connect(name)
                if sock is None:
                    self._start(name)
                    sock = self._connect(name)
        if sock is None:
            self.fallback(attempt)  # nothing was sent: starting it the slow way is safe
            return
        with sock:
            sock.settimeout(REPLY_TIMEOUT_S)
            # Sent: from here on the runner may exist, so there is no second launch.
            sock.sendall(str(attempt.absolute()).encode() + b"\n")
            with contextlib.suppress(OSError):
                sock.recv(64)

    def _connect(self, name: str) -> socket.socket | None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(REPLY_TIMEOUT_S)
            sock.connect("\0" + name)
            if _peer_uid(sock) != os.geteuid():
                raise ConnectionRefusedError("the helper's name is held by another user")
        except OSError:
            sock.close()
            return None
        return sock

    def _start(self, name: str) -> None:
        """Start the helper and wait until it listens (its first process exits then)."""
        log = self.local_dir / "spawner.log"
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError:
            return
        try:
            with open(fd, "ab") as err:
                proc = subprocess.Popen(
                    [self.python, "-m", __name__, name, str(self.local_dir.absolute())],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                    start_new_session=True,
                    close_fds=True,
                )
        except (OSError, subprocess.SubprocessError):
            return
        try:
            proc.wait(timeout=REPLY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            threading.Thread(target=proc.wait, daemon=True).start()


def serve(name: str, local_dir: Path) -> int:
    """The helper: listen on ``name``, detach, then fork a runner per request."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind("\0" + name)
    except OSError:
        return 0  # another helper holds the name (a concurrent start): it serves
    listener.listen(128)
    if os.fork() > 0:
        os._exit(0)  # the starter waits for this: the helper listens from now on
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    listener.settimeout(CHECK_S)
    last = time.monotonic()
    while time.monotonic() - last < IDLE_EXIT_S and local_dir.is_dir():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        last = time.monotonic()
        with conn:
            _handle(conn, listener)
    return 0


def _handle(conn: socket.socket, listener: socket.socket) -> None:
    try:
        conn.settimeout(REPLY_TIMEOUT_S)
        if _peer_uid(conn) != os.geteuid():
            return  # only the server's own uid may start runners
        request = b""
        while not request.endswith(b"\n") and len(request) < _MAX_REQUEST:
            chunk = conn.recv(_MAX_REQUEST)
            if not chunk:
                return
            request += chunk
        attempt = Path(request.rstrip(b"\n").decode())
    except (OSError, UnicodeDecodeError):
        return
    if not attempt.is_absolute() or not attempt.is_dir():
        print(f"spawner: not an attempt dir: {attempt}", file=sys.stderr)
        return
    child = os.fork()
    if child == 0:
        try:
            listener.close()
            _become_runner(conn, attempt)
        finally:
            os._exit(1)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(child, 0)  # it exits once the runner is forked
    with contextlib.suppress(OSError):
        conn.sendall(b"ok\n")


def _become_runner(conn: socket.socket, attempt: Path) -> None:
    """In the helper's child: a new session, then the runner in a child of it (re-parented to
    init, not a session leader), with stderr to the attempt's ``runner.log``."""
    conn.close()
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    err = os.open(attempt / runner.RUNNER_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.dup2(err, 2)
    os.close(null)
    os.close(err)
    code = 1
    try:
        code = runner.Runner(attempt).run()
    except BaseException as exc:
        print(f"runner: {exc!r}", file=sys.stderr)
    finally:
        sys.stderr.flush()
        os._exit(code)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m gpupool.backends.local.spawner NAME LOCAL_DIR", file=sys.stderr)
        return 2
    return serve(args[0], Path(args[1]))


if __name__ == "__main__":
    sys.exit(main())
