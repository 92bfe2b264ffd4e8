"""Error bodies map back to typed exceptions: the inverse of the server's table (docs/code-style.md
§9)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from gpupool.client import errors
from gpupool.client.errors import (
    ConfigInvalid,
    Conflict,
    ConnectionFailed,
    Forbidden,
    GpupoolError,
    InvalidRequest,
    NotFound,
    ServerError,
    Unauthenticated,
    Unavailable,
)
from gpupool.client.sdk import Client
from gpupool.client.testing import FakeApi, error_response

TOKEN = "tok-s3cret-value"


@dataclass(frozen=True)
class Case:
    status: int
    code: str
    want: type[GpupoolError]
    details: Any = None


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            Case(422, "invalid_request", InvalidRequest, [{"field": "resources.gpus"}]),
            id="invalid_request 422",
        ),
        pytest.param(Case(400, "invalid_request", InvalidRequest), id="invalid_request 400"),
        pytest.param(Case(401, "unauthenticated", Unauthenticated), id="unauthenticated"),
        pytest.param(Case(403, "forbidden", Forbidden), id="forbidden"),
        pytest.param(Case(404, "not_found", NotFound), id="not_found"),
        pytest.param(Case(409, "conflict", Conflict), id="conflict"),
        pytest.param(
            Case(422, "config_invalid", ConfigInvalid, [{"line": 3}]),
            id="config_invalid is an InvalidRequest",
        ),
        pytest.param(Case(500, "internal", ServerError), id="internal"),
        pytest.param(Case(503, "unavailable", Unavailable), id="unavailable"),
        pytest.param(Case(409, "lease_lost", Conflict), id="unknown code falls back to status"),
        pytest.param(Case(418, "teapot", GpupoolError), id="unknown code and status"),
    ],
)
def test_error_code_maps_to_exception(case: Case) -> None:
    api = FakeApi()
    api.fail("GET", "/v1/jobs/j-1", case.status, case.code, "it went wrong", case.details)

    with (
        Client("http://x", TOKEN, transport=api.transport) as sdk,
        pytest.raises(GpupoolError) as info,
    ):
        sdk.job("j-1")

    error = info.value
    assert type(error) is case.want
    assert (error.code, error.message, error.status) == (case.code, "it went wrong", case.status)
    assert error.details == case.details


def test_table_covers_every_server_code() -> None:
    assert set(errors.ERRORS_BY_CODE) == {
        "invalid_request",
        "config_invalid",
        "unauthenticated",
        "forbidden",
        "not_found",
        "conflict",
        "payload_too_large",
        "too_many_requests",
        "unavailable",
        "internal",
    }
    for code, cls in errors.ERRORS_BY_CODE.items():
        assert cls.code == code


@pytest.mark.parametrize(
    ("status", "body", "want"),
    [
        pytest.param(502, b"<html>Bad Gateway</html>", ServerError, id="proxy html 502"),
        pytest.param(404, b"", NotFound, id="empty 404"),
        pytest.param(503, b"Service Unavailable", Unavailable, id="proxy text 503"),
        pytest.param(401, b'{"detail": "nope"}', Unauthenticated, id="foreign json 401"),
    ],
)
def test_bodies_that_are_not_ours_map_by_status(status: int, body: bytes, want: type) -> None:
    response = httpx.Response(status, content=body)

    with pytest.raises(want, match=f"HTTP {status}"):
        errors.raise_for_response(response)


@dataclass(frozen=True)
class RetryCase:
    header: str | None
    want: float | None
    says: str


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(RetryCase("2", 2.0, "retry in 2 s"), id="seconds are kept"),
        pytest.param(RetryCase(None, None, "retry shortly"), id="no header"),
        pytest.param(
            RetryCase("Wed, 21 Oct 2026 07:28:00 GMT", None, "retry shortly"),
            id="an HTTP date is ignored",
        ),
        pytest.param(RetryCase("-1", None, "retry shortly"), id="a negative delay is ignored"),
    ],
)
def test_unavailable_says_to_retry_and_when(case: RetryCase) -> None:
    headers = {} if case.header is None else {"Retry-After": case.header}
    body = {"error": {"code": "unavailable", "message": "the database is unavailable"}}
    response = httpx.Response(503, json=body, headers=headers)

    with pytest.raises(Unavailable) as info:
        errors.raise_for_response(response)

    assert info.value.retry_after == case.want
    assert isinstance(info.value, ServerError)  # callers that caught ServerError still do
    assert str(info.value).startswith("the database is unavailable")
    assert case.says in str(info.value)


def test_success_does_not_raise() -> None:
    errors.raise_for_response(httpx.Response(201, json={}))


def _refuse(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("[Errno 111] Connection refused", request=request)


def test_unreachable_server_names_the_url_and_the_fix() -> None:
    with (
        Client("http://gpupool.test:9", TOKEN, transport=httpx.MockTransport(_refuse)) as sdk,
        pytest.raises(ConnectionFailed) as info,
    ):
        sdk.jobs()

    message = str(info.value)
    assert "http://gpupool.test:9" in message
    assert "gpupool server" in message
    assert "GPUPOOL_URL" in message
    assert isinstance(info.value.__cause__, httpx.ConnectError)


def test_broken_connection_is_connection_failed() -> None:
    def drop(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("peer closed connection", request=request)

    with (
        Client("http://x", TOKEN, transport=httpx.MockTransport(drop)) as sdk,
        pytest.raises(ConnectionFailed, match="lost the connection"),
    ):
        sdk.whoami()


def test_url_userinfo_is_stripped_from_messages_and_reprs() -> None:
    url = "http://user:hunter2@gpupool.test:9"
    with (
        Client(url, TOKEN, transport=httpx.MockTransport(_refuse)) as sdk,
        pytest.raises(ConnectionFailed) as info,
    ):
        assert "hunter2" not in repr(sdk)
        sdk.jobs()

    assert "hunter2" not in str(info.value)
    assert "gpupool.test:9" in str(info.value)


@pytest.mark.parametrize(
    "respond",
    [
        pytest.param(lambda r: error_response(401, "unauthenticated", "bad token"), id="401"),
        pytest.param(lambda r: error_response(500, "internal", "boom"), id="500"),
        pytest.param(_refuse, id="unreachable"),
    ],
)
def test_token_never_appears_in_errors_or_reprs(respond: Any) -> None:
    with (
        Client("http://x", TOKEN, transport=httpx.MockTransport(respond)) as sdk,
        pytest.raises(GpupoolError) as info,
    ):
        sdk.whoami()

    error = info.value
    for text in (str(error), repr(error), repr(sdk), str(error.details), str(error.__cause__)):
        assert TOKEN not in text


def test_a_refused_request_says_which_field_and_why_when_printed() -> None:
    details = [
        {"field": "resources.gpu_types", "message": "unknown gpu type 'a100'; use h100 or t4"},
        {"field": "resources.gpus", "message": "must be at most 8"},
    ]
    error = InvalidRequest("invalid request", details=details, status=422)
    assert str(error) == (
        "invalid request (resources.gpu_types: unknown gpu type 'a100'; use h100 or t4; "
        "resources.gpus: must be at most 8)"
    )
    assert str(NotFound("no job with id 'j-1'")) == "no job with id 'j-1'"
    assert str(ConfigInvalid("bad config", details=[{"line": 3}])) == "bad config"
