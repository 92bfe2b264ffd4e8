"""Read models tolerate a newer server: unknown fields ignored, new fields defaulted."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gpupool.client.models import Job, Page, Team, WhyReport
from gpupool.client.testing import job_json, team_json, why_json


def test_job_from_minimal_payload_uses_defaults() -> None:
    job = Job.model_validate({"id": "j-1", "status": "queued"})

    assert job.resources.gpus == 1
    assert job.attempts == []
    assert not job.finished


def test_unknown_status_still_parses() -> None:
    # A status added by a newer server must not make every listing fail.
    assert Job.model_validate(job_json(status="suspended")).status == "suspended"


def test_models_are_frozen() -> None:
    job = Job.model_validate(job_json())
    with pytest.raises(ValidationError):
        job.status = "running"  # type: ignore[misc]


def test_page_team_why_ignore_unknown_fields() -> None:
    page = Page.model_validate({"items": [job_json(extra=1)], "next_cursor": None, "total": 9})
    team = Team.model_validate(team_json(lent={"h100": 1}))
    why = WhyReport.model_validate(why_json(trace_id="abc"))

    assert page.items[0].id == "j-0001"
    assert team.quota["h100"].borrowing_limit == 2
    assert why.last_considered_at is not None
