"""Store rows → API read models. The only place that knows both shapes."""

from __future__ import annotations

from collections.abc import Sequence

from gpupool.core.jobs import shown_status
from gpupool.server.schemas import AttemptOut, ContainerOut, GrantOut, JobOut, ResourcesOut
from gpupool.state.models import AttemptRow, JobRow


def devices_of(placements: Sequence[dict[str, object]]) -> list[list[int]]:
    return [[int(d) for d in p.get("devices", [])] for p in placements]  # type: ignore[attr-defined]


def attempt_out(row: AttemptRow) -> AttemptOut:
    grant = (row.handle or {}).get("grant")
    return AttemptOut(
        number=row.number,
        status=row.status,
        pool=row.pool,
        gpu_type=row.gpu_type,
        devices=devices_of(row.placements),
        borrowed=row.borrowed,
        admitted_at=row.admitted_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        exit_code=row.exit_code,
        message=row.message,
        grant=GrantOut.model_validate(grant) if isinstance(grant, dict) else None,
    )


def job_out(row: JobRow, attempts: Sequence[AttemptRow] | None = None) -> JobOut:
    return JobOut(
        id=row.id,
        name=row.name,
        team=row.team,
        user=row.user,
        status=shown_status(row.status, row.cancel_requested),
        priority_class=row.priority_class,
        priority=row.priority,
        kind=row.kind,
        backend=row.backend,
        command=list(row.command),
        env=dict(row.env),
        resources=ResourcesOut(
            gpus=row.gpus,
            gpu_types=list(row.gpu_types),
            nodes=row.nodes,
            cpus=row.cpus,
            memory_gb=row.memory_gb,
        ),
        max_runtime_s=row.max_runtime_s,
        checkpoint_interval_s=row.checkpoint_interval_s,
        inputs=list(row.inputs),
        outputs=list(row.outputs),
        submitted_at=row.submitted_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        attempt=row.attempt,
        pool=row.pool,
        gpu_type=row.gpu_type,
        exit_code=row.exit_code,
        message=row.message,
        attempts=None if attempts is None else [attempt_out(a) for a in attempts],
        array_id=row.array_id,
        array_index=row.array_index,
        image=row.container["image"] if row.container else None,
        image_pull_secret=row.container.get("pull_secret") if row.container else None,
        container=ContainerOut.model_validate(row.container) if row.container else None,
    )
