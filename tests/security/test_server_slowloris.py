"""Slow clients cannot hold the server's connections (L4).

The attack: requests that begin and never end (a request line and some headers, then
nothing) were never timed out; at 1,024 open files, 1,100 of them made ``/healthz`` fail.

Here the server starts with its soft limit on open files lowered to 256 (the hard limit left
as it is) and 1-second read deadlines; 300 half-open requests (headers that never end, and
bodies that stop) must be closed by the server within a few seconds, and ``/healthz`` must
answer all along. Before the fix they stayed open forever and the server, out of
descriptors, stopped accepting connections.
"""

from __future__ import annotations

import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.demo_server import demo_server
from support.server import ServerProcess

HALF_OPEN = 300
SOFT_FILES = 256

pytestmark = pytest.mark.slow


def lower_soft_open_files() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT_FILES, hard))


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2 * HALF_OPEN:
        pytest.skip(f"the hard limit on open files ({hard}) leaves no room for the test")
    env = {"GPUPOOL_HEADER_TIMEOUT_S": "1", "GPUPOOL_BODY_TIMEOUT_S": "1"}
    with demo_server(env, preexec=lower_soft_open_files) as started:
        yield started


def half_open(server: ServerProcess, i: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    if i % 3 == 0:  # a request line and part of the headers
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    elif i % 3 == 1:  # complete headers, a body that stops
        sock.sendall(
            b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"comm'
        )
    # else: connected, nothing sent at all
    return sock


def closed_by_server(sock: socket.socket, deadline: float) -> bool:
    """True when the server closes the connection (after a 408 or without a word)."""
    while True:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(4096)
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
        if not data:
            return True


def healthz_ms(url: str) -> float:
    start = time.monotonic()
    reply = httpx.get(f"{url}/healthz", timeout=3)
    assert reply.status_code == 200
    return (time.monotonic() - start) * 1000


def test_incomplete_requests_time_out_and_healthz_keeps_answering(
    server: ServerProcess,
) -> None:
    sockets = []
    try:
        for i in range(HALF_OPEN):
            sockets.append(half_open(server, i))
        during = [healthz_ms(server.url) for _ in range(5)]
        deadline = time.monotonic() + 10  # 1 s deadlines, generous for a loaded machine
        still_open = [s for s in sockets if not closed_by_server(s, deadline)]
        after = [healthz_ms(server.url) for _ in range(5)]
    finally:
        for sock in sockets:
            sock.close()
    print(
        f"/healthz with {HALF_OPEN} half-open requests: max {max(during):.0f} ms; after: "
        f"max {max(after):.0f} ms"
    )
    assert still_open == [], f"{len(still_open)} of {HALF_OPEN} half-open requests still open"
    assert max(during) < 2000 and max(after) < 2000


def test_the_server_raises_its_soft_open_files_limit(server: ServerProcess) -> None:
    assert server.proc is not None
    limits = Path(f"/proc/{server.proc.pid}/limits").read_text(encoding="utf-8")
    line = next(row for row in limits.splitlines() if row.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    assert soft == hard, line
