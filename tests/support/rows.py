"""Store rows for tests that write the store directly (as the job service would)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpupool.core.jobs import JobStatus
from gpupool.state.models import JobRow

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def queued_job(job_id: str, **fields: Any) -> JobRow:
    """A queued 1-GPU job of ``team-a`` with every column set; ``fields`` override any."""
    values: dict[str, Any] = {
        "id": job_id,
        "name": job_id,
        "team": "team-a",
        "user": "alice",
        "status": JobStatus.QUEUED.value,
        "priority_class": "default",
        "priority": 0,
        "kind": "batch",
        "backend": "auto",
        "command": ["true"],
        "env": {},
        "gpus": 1,
        "nodes": 1,
        "cpus": 0.0,
        "memory_gb": 0.0,
        "gpu_types": [],
        "inputs": [],
        "outputs": [],
        "max_runtime_s": None,
        "idempotency_key": None,
        "submitted_at": T0,
        "attempt": 0,
        "message": "",
        "cancel_requested": False,
        "pending_reasons": [],
    }
    values.update(fields)
    return JobRow(**values)
