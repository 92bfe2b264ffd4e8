"""Log following cannot take the server down, and logs are redacted for every reader (H3, L3).

The attack: 50 ``GET /v1/jobs/{id}/logs?follow=true`` from a *viewer* on a quiet running job
made every ``/healthz`` and ``GET /v1/jobs`` time out, even after the clients left, because
each follower held one of the server's 40 threads in a ``sleep`` loop. And the API served a
job's output unredacted: a viewer read a live PUT URL that a member's job printed.

Here, against a real server: 50 followers (with the per-user bound raised to let them in)
leave ``/healthz`` and the job list fast, and everything is normal after they disconnect;
with the default bound the ninth stream of one user is refused with 429 naming the limit;
and a signed URL a job prints reaches neither a plain read nor a follower.
"""

from __future__ import annotations

import asyncio
import re
import statistics
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from support.demo_server import TERMINAL, demo_server, submit, wait_status
from support.server import ServerProcess

FOLLOWERS = 50
PROBES = 40
RUNNING = frozenset({"running"})
SIG = re.compile(r"gp_sig=(?!\[REDACTED\])")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """Room for all 50 followers of one user: the bound must not hide a blocking stream."""
    with demo_server({"GPUPOOL_LOG_FOLLOWERS_PER_USER": str(FOLLOWERS + 10)}) as started:
        yield started


@pytest.fixture(scope="module")
def bounded() -> Iterator[ServerProcess]:
    """The default bound (8 streams per user)."""
    with demo_server() as started:
        yield started


def quiet_job(server: ServerProcess) -> str:
    with server.client("alice") as alice:
        job = submit(alice, ["sleep", "300"])
        wait_status(alice, job, RUNNING)
    return job


def cancel(server: ServerProcess, job: str) -> None:
    with server.client("alice") as alice:
        alice.post(f"/v1/jobs/{job}/cancel")


async def follow(client: httpx.AsyncClient, job: str, opened: list[int]) -> None:
    async with client.stream("GET", f"/v1/jobs/{job}/logs", params={"follow": "true"}) as reply:
        opened.append(reply.status_code)
        async for _ in reply.aiter_bytes():
            pass


async def probe(client: httpx.AsyncClient, path: str) -> float:
    """Seconds for one answer; a timeout counts as 10 s (the attack made probes time out)."""
    start = time.monotonic()
    try:
        reply = await client.get(path, timeout=10)
    except httpx.TimeoutException:
        return 10.0
    assert reply.status_code == 200, reply.text
    return time.monotonic() - start


async def probes(client: httpx.AsyncClient, path: str, count: int) -> list[float]:
    seconds = []
    for _ in range(count):
        seconds.append(await probe(client, path))
        if seconds[-1] >= 10.0:
            break  # the server is not answering: no need to wait for the rest
        await asyncio.sleep(0.05)
    return seconds


async def under_followers(server: ServerProcess, job: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {server.tokens['vera']}"}
    limits = httpx.Limits(max_connections=FOLLOWERS + 10)
    timeout = httpx.Timeout(10, read=None)
    async with (
        httpx.AsyncClient(
            base_url=server.url, headers=headers, limits=limits, timeout=timeout
        ) as viewer,
        httpx.AsyncClient(base_url=server.url, headers=headers, timeout=10) as prober,
    ):
        opened: list[int] = []
        streams = [asyncio.create_task(follow(viewer, job, opened)) for _ in range(FOLLOWERS)]
        deadline = time.monotonic() + 30
        while len(opened) < FOLLOWERS and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(1)  # let them settle into polling
        during = await probes(prober, "/healthz", PROBES)
        listing = await probes(prober, "/v1/jobs", 10)
        for stream in streams:
            stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
        await asyncio.sleep(1)  # the server notices the disconnects
        after = await probes(prober, "/healthz", 10)
        refollowed: list[int] = []
        again = asyncio.create_task(follow(prober, job, refollowed))
        while not refollowed and time.monotonic() < deadline + 30:
            await asyncio.sleep(0.05)
        again.cancel()
        await asyncio.gather(again, return_exceptions=True)
    return {
        "opened": opened,
        "during": during,
        "listing": listing,
        "after": after,
        "refollowed": refollowed,
    }


def test_fifty_followers_leave_the_server_responsive(server: ServerProcess) -> None:
    job = quiet_job(server)
    try:
        seen = asyncio.run(under_followers(server, job))
    finally:
        cancel(server, job)
    assert seen["opened"] == [200] * FOLLOWERS, "every follower got its stream"
    during, listing, after = seen["during"], seen["listing"], seen["after"]
    report = (
        f"/healthz under {FOLLOWERS} followers: p50 {statistics.median(during) * 1000:.0f} ms, "
        f"max {max(during) * 1000:.0f} ms; GET /v1/jobs max {max(listing) * 1000:.0f} ms; "
        f"/healthz after they left: max {max(after) * 1000:.0f} ms"
    )
    print(report)
    # Generous for a loaded 2-core CI machine; before the fix every probe timed out (10 s).
    assert statistics.median(during) < 0.25, report
    assert max(during) < 2.0, report
    assert max(listing) < 3.0, report
    assert max(after) < 2.0, report
    assert seen["refollowed"] == [200], "a new follower is served after the others left"


def test_a_user_may_not_open_more_followers_than_the_bound(bounded: ServerProcess) -> None:
    job = quiet_job(bounded)
    timeout = httpx.Timeout(10, read=None)
    held: list[Any] = []
    try:
        with (
            httpx.Client(
                base_url=bounded.url,
                headers={"Authorization": f"Bearer {bounded.tokens['vera']}"},
                timeout=timeout,
            ) as vera,
            bounded.client("alice") as alice,
        ):
            for _ in range(8):
                stream = vera.stream("GET", f"/v1/jobs/{job}/logs", params={"follow": "true"})
                reply = stream.__enter__()
                held.append(stream)
                assert reply.status_code == 200
            ninth = vera.get(f"/v1/jobs/{job}/logs", params={"follow": "true"})
            assert ninth.status_code == 429, ninth.text
            error = ninth.json()["error"]
            assert error["code"] == "too_many_requests"
            assert "GPUPOOL_LOG_FOLLOWERS_PER_USER=8" in error["message"]
            # Plain reads and other users are not bounded by vera's streams.
            assert vera.get(f"/v1/jobs/{job}/logs").status_code == 200
            with alice.stream(
                "GET", f"/v1/jobs/{job}/logs", params={"follow": "true"}, timeout=timeout
            ) as other:
                assert other.status_code == 200
            for stream in held:
                stream.__exit__(None, None, None)
            held.clear()
            deadline = time.monotonic() + 10
            while True:  # the server frees a slot once it sees the disconnect
                with vera.stream(
                    "GET", f"/v1/jobs/{job}/logs", params={"follow": "true"}, timeout=timeout
                ) as again:
                    if again.status_code == 200:
                        break
                assert time.monotonic() < deadline, "slots were not given back"
                time.sleep(0.2)
    finally:
        for stream in held:
            stream.__exit__(None, None, None)
        cancel(bounded, job)


# The job prints its real signed PUT URL, and a fake signature split over two writes a
# second apart (a follower reads the two halves separately).
LEAKY = (
    'echo "upload to $GPUPOOL_OUTPUT_URL"; '
    "printf 'again: http://x/?gp_m=PUT&gp_sig=AAAA'; sleep 1; printf 'BBBB0123456789\\n'; "
    "sleep 1; echo done"
)


def test_logs_are_redacted_for_a_viewer(bounded: ServerProcess) -> None:
    with bounded.client("alice") as alice, bounded.client("vera") as vera:
        job = submit(alice, ["sh", "-c", LEAKY], outputs=["shared/leak"])
        with vera.stream(
            "GET",
            f"/v1/jobs/{job}/logs",
            params={"follow": "true"},
            timeout=httpx.Timeout(10, read=30),
        ) as stream:
            assert stream.status_code == 200
            followed = b"".join(stream.iter_bytes()).decode()
        assert wait_status(alice, job, TERMINAL)["status"] == "succeeded"
        plain = vera.get(f"/v1/jobs/{job}/logs")
    assert plain.headers["X-Log-Complete"] == "true"
    for text in (followed, plain.text):
        assert "upload to http" in text and "done" in text, text
        assert SIG.search(text) is None, f"a signature reached the viewer:\n{text}"
        assert "AAAABBBB" not in text and "BBBB0123456789" not in text, text
        assert text.count("gp_sig=[REDACTED]") == 2, text
