"""The store's jobs as a simulator trace (``gpupool history export``), for what-if replays.

A job becomes one row of the generic trace format (:mod:`gpupool.sim.trace`): its id, submit
time (ISO, UTC), the seconds its last attempt ran, its GPUs (of the whole job) and nodes, its
team, gpu type, priority class and checkpoint interval. Nothing else: no command, environment,
name or user ever reaches the file (the rows it is made from do not carry them).

Which jobs: those whose last attempt started and ended (succeeded, failed, or cancelled while
running: the time it ran is what it needed of the cluster then). Jobs that never started
(cancelled while queued, still queued) and jobs still running are left out and counted.

The gpu type: the one the job asked for when it asked for one; the one its attempt ran on when
it accepted several (a trace row names one); empty (any) when it accepted any.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

COLUMNS = (
    "job_id",
    "submit_time",
    "duration_s",
    "gpus",
    "nodes",
    "team",
    "gpu_type",
    "priority_class",
    "checkpoint_interval_s",
)


@dataclass(slots=True)
class Export:
    """The rows written and what was left out, by why."""

    rows: list[dict[str, str]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def trace_rows(jobs: Iterable[Any]) -> Export:
    """Rows of ``state.history.submitted_between`` as trace rows (see the module docstring)."""
    out = Export()
    for job in jobs:
        started, finished = job.attempt_started_at, job.attempt_finished_at
        if started is None:
            out.skip("never started")
            continue
        if finished is None:
            out.skip("still running")
            continue
        seconds = (finished - started).total_seconds()
        if seconds <= 0:
            out.skip("ran for no time")
            continue
        asked = list(job.gpu_types or [])
        gpu_type = asked[0] if len(asked) == 1 else ((job.ran_on or "") if asked else "")
        out.rows.append(
            {
                "job_id": job.id,
                "submit_time": _iso(job.submitted_at),
                "duration_s": f"{seconds:.3f}".rstrip("0").rstrip("."),
                "gpus": str(job.gpus * job.nodes),
                "nodes": str(job.nodes),
                "team": job.team,
                "gpu_type": gpu_type,
                "priority_class": job.priority_class or "",
                "checkpoint_interval_s": (
                    "" if job.checkpoint_interval_s is None else str(job.checkpoint_interval_s)
                ),
            }
        )
    return out


def write_trace(path: Path, export: Export) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(export.rows)
    return path


def _iso(moment: datetime) -> str:
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).isoformat()
