"""How the CLI writes: Rich tables for people, plain JSON for machines, errors on stderr.

Consoles are made per call, not at import, so they always write to the current
``sys.stdout``/``sys.stderr`` and honour ``COLUMNS`` (test runners swap both). JSON goes through
``typer.echo`` rather than Rich so that it is never wrapped, highlighted or markup-interpreted.
Server-supplied text is escaped before Rich sees it: a message like ``[h100]`` is data, not markup.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpupool.client.errors import GpupoolError, InvalidRequest
from gpupool.client.models import Job


def stdout() -> Console:
    return Console(highlight=False)


def stderr() -> Console:
    # soft_wrap: an error line stays one line however narrow the terminal, so it greps well.
    return Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(data: Any) -> None:
    """``--json`` output: one object. A list is ``{"items": [...]}``, the shape of the API's
    lists and of ``jobs --json`` (which adds ``next_cursor``), so every list reads alike."""
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    elif isinstance(data, list):
        data = {
            "items": [
                item.model_dump(mode="json") if isinstance(item, BaseModel) else item
                for item in data
            ]
        }
    typer.echo(json.dumps(data, indent=2))


def table(columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> Table:
    # fold, never ellipsize: people copy ids out of these tables.
    result = Table(*columns, title=title, header_style="bold")
    for column in result.columns:
        column.overflow = "fold"
    for row in rows:
        result.add_row(*(escape(cell_text(cell)) for cell in row))
    return result


def cell_text(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def print_error(error: GpupoolError) -> None:
    console = stderr()
    console.print(f"[bold red]error:[/bold red] {escape(error.message)}")
    if isinstance(error, InvalidRequest):
        for line in detail_lines(error.details):
            console.print(f"  - {escape(line)}")


def detail_lines(details: Any) -> list[str]:
    """One line per problem in an ``invalid_request`` body, whatever shape ``details`` has.

    Handles pydantic-style ``[{"loc": [...], "msg": ...}]``, ``[{"field": ..., "message": ...}]``,
    ``{field: message}`` and plain strings.
    """
    if not details:
        return []
    if isinstance(details, dict):
        return [f"{field}: {message}" for field, message in details.items()]
    if not isinstance(details, list):
        return [str(details)]
    lines = []
    for item in details:
        if not isinstance(item, dict):
            lines.append(str(item))
            continue
        where = item.get("field") or item.get("path") or item.get("loc")
        if isinstance(where, list):
            # FastAPI prefixes the request part ("body", "query"); users only know field names.
            parts = where[1:] if where and where[0] in ("body", "query", "path") else where
            where = ".".join(str(part) for part in parts)
        message = item.get("message") or item.get("msg") or json.dumps(item)
        if item.get("hint"):  # a configuration problem: say how to fix it, as validate does
            message = f"{message} — hint: {item['hint']}"
        if item.get("file"):  # ... and where, as FILE:LINE
            line = f":{item['line']}" if item.get("line") else ""
            where = f"{item['file']}{line}: {where}" if where else f"{item['file']}{line}"
        lines.append(f"{where}: {message}" if where else str(message))
    return lines


def gpus_label(job: Job) -> str:
    """``2xh100`` (GPUs per node, gpu type), ``2xh100|t4`` before a type is chosen."""
    gpu_type = job.gpu_type or "|".join(job.resources.gpu_types or []) or "any"
    label = f"{job.resources.gpus}x{gpu_type}"
    return f"{label} on {job.resources.nodes} nodes" if job.resources.nodes > 1 else label


def age(then: datetime | None, now: datetime | None = None) -> str:
    """Compact age like ``45s``, ``12m``, ``3h``, ``2d``."""
    if then is None:
        return "-"
    now = now or datetime.now(UTC)
    if then.tzinfo is None:
        then = then.replace(tzinfo=UTC)
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def timestamp(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else "-"
