"""Cursor decoding is total (L1): any text a client sends back as a cursor is either one the
server made, decoded to values the store can compare against, or a 422 naming ``cursor``.

Before the fix a time without a zone, deep JSON and an audit id past 2^63 escaped the
decoders as unhandled errors (500); the real-server cases are in ``test_server_requests``.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from gpupool.core.errors import InvalidRequest
from gpupool.server.cursors import (
    decode_audit_cursor,
    decode_job_cursor,
    encode_audit_cursor,
    encode_job_cursor,
)

BIGINT_MAX = 2**63 - 1


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


def check_job(cursor: str) -> None:
    try:
        at, job_id = decode_job_cursor(cursor)
    except InvalidRequest as exc:
        assert [d["field"] for d in exc.details] == ["cursor"]
        return
    assert at.tzinfo is not None and at.utcoffset() is not None
    assert isinstance(job_id, str) and 0 < len(job_id) <= 64


def check_audit(cursor: str) -> None:
    try:
        last_id = decode_audit_cursor(cursor)
    except InvalidRequest as exc:
        assert [d["field"] for d in exc.details] == ["cursor"]
        return
    assert 0 <= last_id <= BIGINT_MAX


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
times = st.datetimes(timezones=st.none() | st.timezones()).map(datetime.isoformat)


@settings(max_examples=400)
@given(st.text(max_size=300))
def test_any_text_decodes_or_is_refused(cursor: str) -> None:
    check_job(cursor)
    check_audit(cursor)


@settings(max_examples=400)
@given(st.binary(max_size=200))
def test_any_bytes_under_base64_decode_or_are_refused(raw: bytes) -> None:
    check_job(b64(raw))
    check_audit(b64(raw))


@settings(max_examples=300)
@given(st.one_of(json_values, st.tuples(times, st.text(max_size=80)).map(list)))
def test_any_json_under_base64_decodes_or_is_refused(value: object) -> None:
    check_job(b64(json.dumps(value).encode()))


@settings(max_examples=200)
@given(st.integers(min_value=-(2**70), max_value=2**70) | st.text(max_size=30))
def test_any_audit_id_decodes_or_is_refused(value: object) -> None:
    check_audit(b64(f"a{value}".encode()))


@given(
    st.datetimes(timezones=st.just(UTC), min_value=datetime(1971, 1, 1)),
    st.from_regex(r"j-[0-9a-f]{12}", fullmatch=True),
)
def test_a_job_cursor_round_trips(at: datetime, job_id: str) -> None:
    assert decode_job_cursor(encode_job_cursor(at, job_id)) == (at, job_id)


@given(st.integers(min_value=0, max_value=BIGINT_MAX))
def test_an_audit_cursor_round_trips(last_id: int) -> None:
    assert decode_audit_cursor(encode_audit_cursor(last_id)) == last_id
