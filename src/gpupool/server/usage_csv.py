"""CSV renderings of the usage and cost reports: one header line, one line per row.

A summary's columns are the period, the grouped fields (plus ``team`` and ``pool`` when an
``(idle)`` row names them), then the numbers; costs add the currency. Missing spans cannot be
rows of the same shape, so each is a ``# missing`` comment line before the header, which
spreadsheet tools can be told to skip.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence

from gpupool.server.usage_schemas import (
    CostAttemptOut,
    CostAttempts,
    CostSummary,
    UsageAttemptOut,
    UsageAttempts,
    UsageSummary,
)

_NUMBERS = ("allocated_gpu_hours", "borrowed_gpu_hours", "idle_gpu_hours")
_COSTS = ("allocated_cost", "borrowed_cost", "idle_cost", "total_cost", "unpriced", "currency")


def _write(columns: Sequence[str], rows: Iterable[dict[str, object]], comments: list[str]) -> str:
    out = io.StringIO()
    for line in comments:
        out.write(f"# {line}\n")
    writer = csv.DictWriter(
        out, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n"
    )
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


def _missing(report: UsageSummary | UsageAttempts) -> list[str]:
    return [
        f"missing {m.start.isoformat()}/{m.end.isoformat()}: {m.reason}" for m in report.missing
    ]


def summary_csv(report: UsageSummary) -> str:
    groups = list(report.group_by)
    # (idle) rows name their team as "(idle)" and their pool whatever the grouping.
    groups += [
        f
        for f in ("team", "pool")
        if f not in groups and any(getattr(r, f) is not None for r in report.rows)
    ]
    columns = ["period", "period_start", "period_end", *groups, *_NUMBERS]
    extra: dict[str, object] = {}
    if isinstance(report, CostSummary):
        columns += _COSTS
        extra["currency"] = report.currency
    rows = ({**r.model_dump(mode="json"), **extra} for r in report.rows)
    return _write(columns, rows, _missing(report))


def attempts_csv(report: UsageAttempts) -> str:
    extra: dict[str, object] = {}
    if isinstance(report, CostAttempts):
        columns = [*CostAttemptOut.model_fields, "currency"]
        extra["currency"] = report.currency
    else:
        columns = list(UsageAttemptOut.model_fields)
    rows = ({**r.model_dump(mode="json"), **extra} for r in report.items)
    return _write(columns, rows, _missing(report))
