"""The SDK's usage and cost reports: the query on the wire, the answers it reads."""

from __future__ import annotations

from datetime import UTC, date, datetime

import httpx
import pytest

from gpupool.client.errors import InvalidRequest
from gpupool.client.sdk import Client
from gpupool.client.testing import FakeApi


def test_range_and_grouping_go_on_the_wire(api: FakeApi, client: Client) -> None:
    api.add(
        "GET",
        "/v1/costs",
        json={"currency": "EUR", "rows": [{"team": "team-a", "total_cost": 3.5}]},
    )

    report = client.costs(
        team="team-a",
        start=date(2026, 11, 1),
        end=datetime(2026, 11, 8, 12, tzinfo=UTC),
        period="day",
        group_by=["team", "pool"],
    )

    assert dict(api.last.url.params) == {
        "team": "team-a",
        "from": "2026-11-01",
        "to": "2026-11-08T12:00:00+00:00",
        "period": "day",
        "group_by": "team,pool",
    }
    assert (report.currency, report.rows[0].total_cost) == ("EUR", 3.5)


def test_a_usage_row_has_no_cost(api: FakeApi, client: Client) -> None:
    api.add("GET", "/v1/usage", json={"rows": [{"team": "team-a", "allocated_gpu_hours": 2.0}]})

    (row,) = client.usage(period="month", at="2026-11-10").rows

    assert (row.allocated_gpu_hours, row.total_cost) == (2.0, None)
    assert dict(api.last.url.params) == {"period": "month", "at": "2026-11-10"}


def test_attempt_pages_and_csv(api: FakeApi, client: Client) -> None:
    def paged(request: httpx.Request) -> httpx.Response:
        if request.headers.get("accept") == "text/csv":
            return httpx.Response(200, text="attempt_id\n1\n")
        if request.url.params.get("cursor") == "1":
            return httpx.Response(200, json={"items": [{"attempt_id": 2}], "next_cursor": None})
        return httpx.Response(200, json={"items": [{"attempt_id": 1}], "next_cursor": "1"})

    api.add("GET", "/v1/costs", paged)

    assert [a.attempt_id for a in client.iter_usage_attempts(costs=True, limit=1)] == [1, 2]
    assert api.last.url.params["report"] == "attempts"
    assert client.usage_csv(costs=True, attempts=True) == "attempt_id\n1\n"


def test_a_bad_query_is_invalid_request(api: FakeApi, client: Client) -> None:
    api.fail("GET", "/v1/usage", 422, "invalid_request", "group_by: unknown group_by colour")

    with pytest.raises(InvalidRequest, match="colour"):
        client.usage(group_by="colour")
