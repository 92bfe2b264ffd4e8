"""What every user command shares: the SDK client it talks through and error → exit handling.

``make_client`` is the single seam between the CLI and the network. Tests replace it (e.g.
``monkeypatch.setattr(context, "make_client", ...)``) to hand commands a ``Client`` over an
``httpx.MockTransport``; nothing else in the CLI constructs a client.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import typer

from gpupool.cli import output
from gpupool.cli.exit_codes import exit_code_for
from gpupool.client.errors import GpupoolError
from gpupool.client.sdk import Client


@dataclass(frozen=True)
class Options:
    """The app's global options; ``None`` means "let the SDK settings decide"."""

    url: str | None = None
    token: str | None = field(default=None, repr=False)


def make_client(url: str | None, token: str | None, timeout: float = 30) -> Client:
    return Client(url, token, timeout=timeout)


@contextmanager
def client(ctx: typer.Context) -> Iterator[Client]:
    """Open the SDK client; turn any ``GpupoolError`` into ``error: ...`` and its exit code."""
    options = ctx.find_object(Options) or Options()
    try:
        # Global lookup at call time, so a monkeypatched make_client is honoured.
        with make_client(options.url, options.token) as sdk:
            yield sdk
    except GpupoolError as error:
        output.print_error(error)
        raise typer.Exit(exit_code_for(error)) from None
