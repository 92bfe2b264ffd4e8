"""A store that cannot be reached is answered 503 ``unavailable`` with ``Retry-After``; any
other store error stays a plain 500. Neither body quotes the statement or its parameters."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.exc import (
    DBAPIError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    ProgrammingError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout

from gpupool.core.errors import StoreUnavailable
from gpupool.server import errors
from gpupool.state.db import store_outage, write_conflict

SECRET = "s3cret-env-value"
STATEMENT = "INSERT INTO jobs (env) VALUES (%(env)s)"


def _invalidated() -> DBAPIError:
    error = DBAPIError(STATEMENT, {"env": SECRET}, RuntimeError("terminating connection"))
    error.connection_invalidated = True
    return error


class _Deadlock(Exception):
    sqlstate = "40P01"  # as psycopg reports PostgreSQL's choice of a deadlock's victim


@dataclass(frozen=True)
class Case:
    error: Exception
    status: int


CASES = [
    pytest.param(
        Case(OperationalError(STATEMENT, {"env": SECRET}, ConnectionError("refused")), 503),
        id="refused connection is 503",
    ),
    pytest.param(
        Case(InterfaceError(STATEMENT, {"env": SECRET}, ConnectionError("closed")), 503),
        id="closed connection is 503",
    ),
    pytest.param(Case(_invalidated(), 503), id="invalidated connection is 503"),
    pytest.param(
        Case(PoolTimeout("QueuePool limit of size 10 overflow 10 reached"), 503),
        id="no free pooled connection is 503",
    ),
    pytest.param(Case(StoreUnavailable("the database cannot be reached"), 503), id="typed"),
    pytest.param(
        Case(OperationalError(STATEMENT, {"env": SECRET}, _Deadlock("deadlock detected")), 503),
        id="a transaction undone by a deadlock is 503: retrying it goes through",
    ),
    pytest.param(
        Case(IntegrityError(STATEMENT, {"env": SECRET}, ValueError("duplicate key")), 500),
        id="integrity error is a bug: 500",
    ),
    pytest.param(
        Case(ProgrammingError(STATEMENT, {"env": SECRET}, ValueError("no such column")), 500),
        id="programming error is a bug: 500",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_store_errors_map_to_503_only_when_the_store_is_away(case: Case) -> None:
    app = FastAPI()
    errors.install(app)

    @app.get("/boom")
    def boom() -> None:
        raise case.error

    with TestClient(app, raise_server_exceptions=False) as client:
        reply = client.get("/boom")

    assert reply.status_code == case.status
    assert SECRET not in reply.text and "INSERT" not in reply.text
    if case.status == 503:
        assert reply.headers["Retry-After"] == str(errors.RETRY_AFTER_S)
        assert reply.json()["error"]["code"] == "unavailable"
        assert "retry" in reply.json()["error"]["message"]
    else:
        assert "Retry-After" not in reply.headers
        assert reply.json()["error"]["code"] == "internal"


def test_outage_message_names_the_driver_error_not_the_statement() -> None:
    outage = store_outage(OperationalError(STATEMENT, {"env": SECRET}, ConnectionError("gone")))
    assert outage is not None
    assert outage.message == "the database cannot be reached: ConnectionError: gone"
    assert store_outage(ValueError("not a store error")) is None


def test_a_deadlock_is_a_conflict_to_retry_not_an_unreachable_store() -> None:
    error = OperationalError(STATEMENT, {"env": SECRET}, _Deadlock("deadlock detected"))
    assert write_conflict(error)
    outage = store_outage(error)
    assert outage is not None and "conflicted" in outage.message and "reached" not in outage.message
    assert not write_conflict(OperationalError(STATEMENT, {}, ConnectionError("gone")))
