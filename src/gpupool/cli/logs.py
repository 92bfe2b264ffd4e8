"""``gpupool logs``: a job's output, raw bytes to stdout, optionally followed until it finishes.

Bytes are written unchanged (no decoding, no Rich) so that binary-ish output, progress bars and
partial UTF-8 sequences split across chunks survive a pipe into a file or ``less``.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, BinaryIO

import typer

from gpupool.cli import completion
from gpupool.cli.context import client


def logs(
    ctx: typer.Context,
    job_id: Annotated[
        str,
        typer.Argument(help="Job id.", show_default=False, autocompletion=completion.job_ids),
    ],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep streaming until the job finishes.")
    ] = False,
    offset: Annotated[int, typer.Option(min=0, help="Start at this byte offset.")] = 0,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="JSON instead of raw bytes; with --follow one JSON object per line per chunk.",
        ),
    ] = False,
) -> None:
    """Print a job's log."""
    out = binary_stdout()
    with client(ctx) as sdk:
        if follow:
            for chunk in sdk.follow_logs(job_id, offset=offset):
                out.write(json_line({"data": text(chunk)}) if as_json else chunk)
                # Flush per chunk: someone is watching this stream live.
                out.flush()
            return
        data, next_offset, complete = sdk.logs(job_id, offset=offset)
    if as_json:
        record = {"job_id": job_id, "data": text(data), "next_offset": next_offset}
        out.write(json_line({**record, "complete": complete}))
    else:
        out.write(data)
    out.flush()


def binary_stdout() -> BinaryIO:
    # Looked up per call: test runners and wrappers swap sys.stdout.
    return sys.stdout.buffer


def text(data: bytes) -> str:
    # JSON needs text; undecodable bytes become U+FFFD rather than failing the command.
    return data.decode("utf-8", errors="replace")


def json_line(record: dict[str, object]) -> bytes:
    return (json.dumps(record) + "\n").encode()


def register(app: typer.Typer) -> None:
    app.command("logs")(logs)
