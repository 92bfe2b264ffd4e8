"""Page cursors: opaque to clients, checked strictly when they come back.

A cursor is URL-safe base64 of a small value the server chose: ``[submitted_at, job_id]``
(JSON) for job pages, ``a<id>`` for audit pages. A client may send anything back, so
decoding is total: whatever the bytes (not base64, not UTF-8, JSON nested thousands deep,
a time without a zone, an id past a 64-bit column, a wrong type), the answer is
:class:`InvalidRequest` naming ``cursor`` (422), never an unhandled error. A value that
decodes is one the store can compare against: an aware time, a short id string, an id
within SQL ``BIGINT``.
"""

from __future__ import annotations

import binascii
import json
import re
from datetime import UTC, datetime

from gpupool.core.errors import InvalidRequest

# Cursors the server makes are well under this; a longer one is not ours.
MAX_CURSOR_CHARS = 200
_MAX_ID_CHARS = 64
_BIGINT_MAX = 2**63 - 1
_AUDIT = re.compile(r"a([0-9]{1,19})")


def invalid_cursor(why: str) -> InvalidRequest:
    return InvalidRequest(
        f"invalid cursor: {why}",
        [
            {
                "field": "cursor",
                "message": f"{why}; pass the next_cursor of a previous page unchanged",
            }
        ],
    )


def _text(cursor: str) -> str:
    if len(cursor) > MAX_CURSOR_CHARS:
        raise invalid_cursor(f"longer than {MAX_CURSOR_CHARS} characters")
    try:
        raw = cursor.encode("ascii").translate(bytes.maketrans(b"-_", b"+/"))
        return binascii.a2b_base64(raw, strict_mode=True).decode("utf-8")
    except (UnicodeError, ValueError) as exc:  # binascii.Error is a ValueError
        raise invalid_cursor("not a cursor of this server") from exc


def encode_job_cursor(submitted_at: datetime, job_id: str) -> str:
    raw = json.dumps([submitted_at.isoformat(), job_id])
    return _encode(raw)


def decode_job_cursor(cursor: str) -> tuple[datetime, str]:
    """The ``(submitted_at, job_id)`` a job page ended at."""
    text = _text(cursor)
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise invalid_cursor("not a cursor of this server") from exc
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, str) for v in value)
        or not 0 < len(value[1]) <= _MAX_ID_CHARS
    ):
        raise invalid_cursor("not a cursor of this server")
    try:
        at = datetime.fromisoformat(value[0])
    except ValueError as exc:
        raise invalid_cursor("its time is not a time") from exc
    if at.tzinfo is None or at.utcoffset() is None:
        raise invalid_cursor("its time has no zone")
    try:
        return at.astimezone(UTC), value[1]
    except OverflowError as exc:  # e.g. year 1 at +05:00: before the first UTC time
        raise invalid_cursor("its time is out of range") from exc


def encode_audit_cursor(last_id: int) -> str:
    return _encode(f"a{last_id}")


def decode_audit_cursor(cursor: str) -> int:
    """The audit id a page ended at (the next page has smaller ids)."""
    match = _AUDIT.fullmatch(_text(cursor))
    if match is None:
        raise invalid_cursor("not a cursor of this server")
    last_id = int(match.group(1))
    if last_id > _BIGINT_MAX:
        raise invalid_cursor("its id is out of range")
    return last_id


def _encode(raw: str) -> str:
    return (
        binascii.b2a_base64(raw.encode(), newline=False)
        .translate(bytes.maketrans(b"+/", b"-_"))
        .decode("ascii")
    )
