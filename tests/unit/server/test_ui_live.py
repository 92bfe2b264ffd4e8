"""The dashboard's log stream as server-sent events: one event per line, as a terminal
would show it, split however the follower's chunks fall."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
import pytest

from gpupool.server.ui.live import log_events


@dataclass
class Case:
    chunks: list[bytes]
    want: list[str]  # the data of each log event


CASES = [
    pytest.param(Case([b"one\ntwo\n"], ["one", "two"]), id="whole lines"),
    pytest.param(Case([b"on", b"e\ntw", b"o"], ["one", "two"]), id="lines split over chunks"),
    pytest.param(Case([b" 10%\r 50%\r100%\n"], ["100%"]), id="a progress bar: its last state"),
    pytest.param(Case([b"done\r\n"], ["done"]), id="CRLF"),
    pytest.param(Case([b"\n\n"], ["", ""]), id="empty lines stay"),
    pytest.param(Case(["caf\u00e9 \u2713\n".encode()], ["caf\u00e9 \u2713"]), id="UTF-8"),
    pytest.param(Case([], []), id="no output"),
]


async def _chunks(chunks: list[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


@pytest.mark.parametrize("case", CASES)
def test_log_events(case: Case) -> None:
    async def collect() -> bytes:
        return b"".join([e async for e in log_events(_chunks(case.chunks))])

    text = anyio.run(collect).decode()
    events = text.split("\n\n")[:-1]
    assert events[-1] == "event: end\ndata: "
    assert [e.removeprefix("event: log\ndata: ") for e in events[:-1]] == case.want
    assert "\r" not in text
