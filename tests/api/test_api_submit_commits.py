"""A submit costs one write transaction: the job, its event and the request's audit entry
are committed together (the audit middleware writes nothing more for it)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

import pytest

from support.apikit import Api


def count_writes(api: Api, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    sessions = api.runtime.sessions
    real = sessions.begin
    counted = [0]

    def begin() -> AbstractContextManager[Any]:
        counted[0] += 1
        return real()

    monkeypatch.setattr(sessions, "begin", begin)
    return counted


def test_a_submit_is_one_transaction_with_its_audit_entry(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.submit("alice")  # the first request may set things up (not counted)
    counted = count_writes(api, monkeypatch)
    job = api.submit("alice")
    assert counted[0] == 1
    monkeypatch.undo()
    newest = audit_entries(api)[0]
    assert (newest["action"], newest["target"], newest["team"], newest["status"]) == (
        "job.submit",
        job["id"],
        "team-a",
        201,
    )
    assert newest["token_id"] == api.tokens["alice"].split("_")[1]


def test_a_replayed_submit_is_still_recorded(api: Api) -> None:
    headers = {**api.as_("alice"), "Idempotency-Key": "k-1"}
    first = api.client.post("/v1/jobs", json={"command": ["true"]}, headers=headers)
    again = api.client.post("/v1/jobs", json={"command": ["true"]}, headers=headers)
    assert (first.status_code, again.status_code) == (201, 200)
    statuses = [e["status"] for e in audit_entries(api)[:2]]
    assert statuses == [200, 201]


def audit_entries(api: Api) -> list[dict[str, Any]]:
    response = api.client.get("/v1/audit", params={"limit": 5}, headers=api.as_("admin"))
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items
