"""Trace input: the generic CSV and the Microsoft Philly CSV, read into :class:`TraceJob`.

Generic CSV columns (header required, any order, extra columns ignored):

``submit_time``     seconds from the start of the trace, or an ISO time (all rows alike)
``duration_s``      seconds the job runs when it has its GPUs (> 0)
``gpus``            GPUs of the whole job (>= 0)
``team``            the team that submits it
optional: ``job_id`` (default: ``j<line>``), ``gpu_type`` (empty = any), ``priority_class``,
``nodes`` (default: from ``gpus`` and the node size, see :func:`job_shape`),
``checkpoint_interval_s`` (whole seconds of work between the job's checkpoints, >= 1; empty =
it never checkpoints: a preempted attempt loses all its work)

Philly (``--trace-format philly``): ``timestamp,duration,num_gpus,gpu_time,cluster`` as
published with the Pollux simulator; each virtual cluster (``cluster``) is a team.

Every bad row is reported with its line number; the loader keeps the good rows, so a caller
can go on (the default) or stop (``--strict``). Jobs are returned in submit order, ties by id.
Submit times are made relative to the first job (the trace starts at 0).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

FORMATS = ("generic", "philly")
REQUIRED = ("submit_time", "duration_s", "gpus", "team")
PHILLY = ("timestamp", "duration", "num_gpus", "cluster")


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    submit_s: float
    duration_s: float
    gpus: int  # of the whole job
    team: str
    gpu_type: str | None = None
    priority_class: str | None = None
    nodes: int | None = None  # None: derived from gpus and the node size
    checkpoint_interval_s: int | None = None  # None: never checkpoints


@dataclass(frozen=True, slots=True)
class RowProblem:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


@dataclass(slots=True)
class Trace:
    jobs: list[TraceJob] = field(default_factory=list)
    problems: list[RowProblem] = field(default_factory=list)
    start: datetime | None = None  # the wall time of submit 0, when the trace had one


class TraceError(ValueError):
    """The file cannot be read as a trace at all (missing file, no header, wrong columns)."""


def load_trace(path: Path, trace_format: str = "generic") -> Trace:
    if trace_format not in FORMATS:
        raise TraceError(f"unknown trace format {trace_format!r}: use one of {', '.join(FORMATS)}")
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            _check_header(reader.fieldnames, trace_format, path)
            rows = list(_rows(reader))
    except OSError as exc:
        raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from exc
    parse = _philly_row if trace_format == "philly" else _generic_row
    raw: list[tuple[int, float | datetime, TraceJob]] = []
    trace = Trace()
    for line, row in rows:
        try:
            raw.append((line, *parse(line, row)))
        except ValueError as exc:
            trace.problems.append(RowProblem(line, str(exc)))
    _rebase(raw, trace)
    return trace


def _check_header(names: Sequence[str] | None, trace_format: str, path: Path) -> None:
    if names is None:
        raise TraceError(f"{path} is empty: a trace needs a header row")
    needed = PHILLY if trace_format == "philly" else REQUIRED
    missing = [name for name in needed if name not in names]
    if missing:
        other = "philly" if trace_format == "generic" else "generic"
        raise TraceError(
            f"{path} has no column {', '.join(missing)}: the {trace_format} format needs "
            f"{', '.join(needed)} (is it --trace-format {other}?)"
        )


def _rows(reader: csv.DictReader[str]) -> Iterator[tuple[int, dict[str, str]]]:
    for row in reader:
        if row.get(None):  # type: ignore[call-overload]
            row = {k: v for k, v in row.items() if k is not None}
        yield reader.line_num, row


def _generic_row(line: int, row: dict[str, str]) -> tuple[float | datetime, TraceJob]:
    submit = _time(row["submit_time"], "submit_time")
    nodes_text = (row.get("nodes") or "").strip()
    interval_text = (row.get("checkpoint_interval_s") or "").strip()
    job = TraceJob(
        job_id=(row.get("job_id") or "").strip() or f"j{line}",
        submit_s=0.0,
        duration_s=_positive(row["duration_s"], "duration_s"),
        gpus=_count(row["gpus"], "gpus"),
        team=_name(row["team"], "team"),
        gpu_type=(row.get("gpu_type") or "").strip() or None,
        priority_class=(row.get("priority_class") or "").strip() or None,
        nodes=_count(nodes_text, "nodes", minimum=1) if nodes_text else None,
        checkpoint_interval_s=(
            _count(interval_text, "checkpoint_interval_s", minimum=1) if interval_text else None
        ),
    )
    return submit, job


def _philly_row(line: int, row: dict[str, str]) -> tuple[float | datetime, TraceJob]:
    job = TraceJob(
        job_id=f"philly-{line}",
        submit_s=0.0,
        duration_s=_positive(row["duration"], "duration"),
        gpus=_count(row["num_gpus"], "num_gpus"),
        team=_name(row["cluster"], "cluster"),
    )
    return _time(row["timestamp"], "timestamp"), job


def _rebase(raw: Iterable[tuple[int, float | datetime, TraceJob]], trace: Trace) -> None:
    """Submit times relative to the first job; numbers and ISO times are not mixed."""
    items = list(raw)
    kinds = {isinstance(submit, datetime) for _, submit, _ in items}
    if len(kinds) > 1:
        first_kind = isinstance(items[0][1], datetime)
        keep = []
        for line, submit, job in items:
            if isinstance(submit, datetime) == first_kind:
                keep.append((line, submit, job))
            else:
                trace.problems.append(
                    RowProblem(line, "submit_time mixes seconds and ISO times; use one kind")
                )
        items = keep
    if not items:
        return
    if isinstance(items[0][1], datetime):
        start = min(submit for _, submit, _ in items)  # type: ignore[type-var]
        trace.start = start  # type: ignore[assignment]
        offset = lambda s: (s - start).total_seconds()  # noqa: E731
    else:
        first = min(submit for _, submit, _ in items)  # type: ignore[type-var]
        offset = lambda s: float(s - first)  # noqa: E731
    jobs = [_with_submit(job, offset(submit)) for _, submit, job in items]
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    seen: set[str] = set()
    for line, _, job in items:
        if job.job_id in seen:
            trace.problems.append(RowProblem(line, f"job_id {job.job_id!r} appears twice"))
        seen.add(job.job_id)
    trace.jobs = jobs if len(seen) == len(jobs) else _unique(jobs)


def _unique(jobs: list[TraceJob]) -> list[TraceJob]:
    seen: set[str] = set()
    out = []
    for job in jobs:
        if job.job_id not in seen:
            seen.add(job.job_id)
            out.append(job)
    return out


def _with_submit(job: TraceJob, submit_s: float) -> TraceJob:
    return TraceJob(
        job.job_id,
        submit_s,
        job.duration_s,
        job.gpus,
        job.team,
        job.gpu_type,
        job.priority_class,
        job.nodes,
        job.checkpoint_interval_s,
    )


def _time(text: str, column: str) -> float | datetime:
    text = (text or "").strip()
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise ValueError(f"{column} {text!r} is not a finite number")
        return value
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{column} {text!r} is neither seconds nor an ISO time (e.g. 2017-10-01 08:00:00)"
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _positive(text: str, column: str) -> float:
    try:
        value = float((text or "").strip())
    except ValueError:
        raise ValueError(f"{column} {text!r} is not a number of seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{column} must be a number of seconds above 0, got {text!r}")
    return value


def _count(text: str, column: str, minimum: int = 0) -> int:
    try:
        value = float((text or "").strip())
    except ValueError:
        raise ValueError(f"{column} {text!r} is not a whole number") from None
    if not value.is_integer() or value < minimum:
        raise ValueError(f"{column} must be a whole number >= {minimum}, got {text!r}")
    return int(value)


def _name(text: str, column: str) -> str:
    value = (text or "").strip()
    if not value:
        raise ValueError(f"{column} is empty: every job needs a team")
    return value
