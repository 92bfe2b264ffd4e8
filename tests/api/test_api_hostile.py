"""Hostile input: a bounded schemathesis run over every operation of the OpenAPI spec.

Whatever arrives, the API answers without a 5xx, without a traceback and without any secret
(API tokens, the grant signing key) in the body. Examples are derandomized so a failure
reproduces; the budget keeps the run to seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.generation.modes import GenerationMode

from support.apikit import Api, make_api

EXAMPLES_PER_OPERATION = 25

schema = schemathesis.pytest.from_fixture("hostile_schema")


@pytest.fixture(scope="module")
def hostile_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    demo = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"
    built = make_api(tmp_path_factory.mktemp("hostile") / "home", demo)
    built.submit("alice")  # something to find, cancel and read
    try:
        yield built
    finally:
        built.client.close()
        built.runtime.close()


@pytest.fixture(scope="module")
def hostile_schema(hostile_api: Api) -> schemathesis.schemas.BaseSchema:
    loaded = schemathesis.openapi.from_asgi("/openapi.json", hostile_api.client.app)
    # Both what the spec allows and what it forbids: wrong types, missing fields, bad JSON.
    loaded.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
    return loaded


def secrets_of(api: Api) -> list[str]:
    found = [token.split("_", 2)[2] for token in api.tokens.values()]
    key = getattr(api.runtime.signer, "_key", None)  # the grant signing key
    if isinstance(key, bytes):
        found += [key.hex(), key.decode("latin-1")]
    return found


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_hostile_input(case: schemathesis.Case, hostile_api: Api) -> None:
    response = case.call(headers=hostile_api.as_("admin"))
    body = response.text
    assert response.status_code < 500, f"{case.method} {case.formatted_path}: {body[:500]}"
    assert "Traceback" not in body
    for secret in secrets_of(hostile_api):
        assert secret not in body, f"{case.method} {case.formatted_path} answers a secret"
