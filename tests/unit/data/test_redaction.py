"""Redaction: every credential shape is masked, what is not a credential is left alone."""

from __future__ import annotations

import io
import json
import logging
import sys
from dataclasses import dataclass

import pytest

from gpupool.data.redaction import (
    MASK,
    RedactingFilter,
    RedactingTextStream,
    redact,
    redact_bytes,
    redact_obj,
    redacting_streams,
)

JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXBhcnQ"
API_TOKEN = "gpt_0a1b2c3d4e5f_q2Vx-Jk_9zLmNoPqRsTuVwXyZ0123456789abcdefgh"


@dataclass(frozen=True)
class Case:
    text: str
    expected: str
    secret: str = ""  # must not survive; defaults to nothing extra beyond `expected`


CASES = [
    pytest.param(
        Case(
            "https://acct.blob.core.windows.net/team-a/x?sv=2022-11-02&se=2030&sp=r&sig=Zm9v%2Bbg%3D",
            f"https://acct.blob.core.windows.net/team-a/x?sv=2022-11-02&se=2030&sp=r&sig={MASK}",
            "Zm9v",
        ),
        id="Azure SAS signature, other parameters kept",
    ),
    pytest.param(
        Case(
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            "&X-Amz-Credential=AKIAEXAMPLE%2F20240101%2Fus-east-1%2Fs3%2Faws4_request"
            "&X-Amz-Date=20240101T000000Z&X-Amz-Signature=0123456789abcdef",
            "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256"
            f"&X-Amz-Credential={MASK}&X-Amz-Date=20240101T000000Z&X-Amz-Signature={MASK}",
            "AKIAEXAMPLE",
        ),
        id="S3 presigned URL: signature and credential",
    ),
    pytest.param(
        Case(
            "GET /v1/artifacts/team-a/out/model.bin?exp=1700000000&m=GET&gp_sig=a1b2c3d4e5 200",
            f"GET /v1/artifacts/team-a/out/model.bin?exp=1700000000&m=GET&gp_sig={MASK} 200",
            "a1b2c3d4e5",
        ),
        id="gpupool grant signature in an access log line",
    ),
    pytest.param(
        Case(
            "url=https%3A%2F%2Fh%2Fx%3Fsig%3Dabcdef%26se%3D1",
            f"url=https%3A%2F%2Fh%2Fx%3Fsig%3D{MASK}%26se%3D1",
            "abcdef",
        ),
        id="signature inside a URL-encoded URL",
    ),
    pytest.param(
        Case(
            '{"url": "https://h/x?sig=abc\\u0026se=1"}',
            f'{{"url": "https://h/x?sig={MASK}\\u0026se=1"}}',
            "abc\\",
        ),
        id="signature in JSON with an escaped ampersand",
    ),
    pytest.param(
        Case("Authorization: Bearer sEcReT.tok-en", f"Authorization: {MASK}", "sEcReT"),
        id="Authorization header",
    ),
    pytest.param(
        Case(
            "headers={'authorization': 'Basic dXNlcjpwYXNz'}",
            f"headers={{'authorization': '{MASK}'}}",
            "dXNlcjpwYXNz",
        ),
        id="Authorization in a dict repr",
    ),
    pytest.param(
        Case("retrying with bearer abc123XYZ", f"retrying with bearer {MASK}", "abc123XYZ"),
        id="bare bearer token",
    ),
    pytest.param(
        Case(f"id_token={JWT} ok", f"id_token={MASK}-jwt ok", "c2lnbmF0dXJl"),
        id="JWT anywhere",
    ),
    pytest.param(
        Case(
            f"export GPUPOOL_TOKEN={API_TOKEN}",
            f"export GPUPOOL_TOKEN=gpt_0a1b2c3d4e5f_{MASK}",
            "q2Vx",
        ),
        id="gpupool API token keeps its id",
    ),
    pytest.param(
        Case(
            "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=bXlrZXk=;EndpointSuffix=x",
            f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={MASK};EndpointSuffix=x",
            "bXlrZXk",
        ),
        id="Azure storage connection string",
    ),
    pytest.param(
        Case(
            "postgresql+psycopg://gp:hunter2@db:5432/gp",
            f"postgresql+psycopg://gp:{MASK}@db:5432/gp",
            "hunter2",
        ),
        id="password in a database URL",
    ),
    pytest.param(
        Case(
            "aws_secret_access_key = wJalrXUtnFEMI",
            f"aws_secret_access_key = {MASK}",
            "wJalrXUtnFEMI",
        ),
        id="AWS secret key assignment",
    ),
    pytest.param(
        Case(
            '"env": {"BEARER": "c2VjcmV0LXZhbHVl", "HF_TOKEN": "hf_abcdefghij"}',
            f'"env": {{"BEARER": "{MASK}", "HF_TOKEN": "{MASK}"}}',
            "c2VjcmV0",
        ),
        id="JSON fields named like a secret",
    ),
    pytest.param(
        Case(
            "GITHUB_TOKEN=ghp_0123456789abcdef client_secret: s3cr3tvalue",
            f"GITHUB_TOKEN={MASK} client_secret: {MASK}",
            "ghp_",
        ),
        id="variables named like a secret",
    ),
    pytest.param(
        Case(f"MY_TOKEN={API_TOKEN}", f"MY_TOKEN=gpt_0a1b2c3d4e5f_{MASK}", "q2Vx"),
        id="API token in a secret-named variable keeps its id",
    ),
    pytest.param(
        Case(
            "tokenizer=bert-base-uncased max_tokens=51200000 num_tokens: 12",
            "tokenizer=bert-base-uncased max_tokens=51200000 num_tokens: 12",
        ),
        id="names that only look like secrets unchanged",
    ),
    pytest.param(
        Case(
            "job 3f2a admitted to pool h100-shared-dev-a-pool; signal SIGTERM; design=sigma",
            "job 3f2a admitted to pool h100-shared-dev-a-pool; signal SIGTERM; design=sigma",
        ),
        id="ordinary text unchanged",
    ),
    pytest.param(
        Case(
            "GET /v1/jobs?team=team-a&status=queued&limit=50",
            "GET /v1/jobs?team=team-a&status=queued&limit=50",
        ),
        id="ordinary query parameters unchanged",
    ),
    pytest.param(
        Case(
            "missing bearer token; pass 'Authorization: Bearer <token>' (bearer scheme)",
            "missing bearer token; pass 'Authorization: Bearer <token>' (bearer scheme)",
        ),
        id="a hint about bearer tokens unchanged",
    ),
    pytest.param(
        Case("Authorization: Bearer <tok>x1y2z3", f"Authorization: {MASK}", "x1y2z3"),
        id="a token after a placeholder-like start still masked",
    ),
    pytest.param(
        Case("Bearer tokenX9secret", f"Bearer {MASK}", "X9secret"),
        id="a token that starts like a word still masked",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_redact(case: Case) -> None:
    out = redact(case.text)
    assert out == case.expected
    if case.secret:
        assert case.secret not in out
    assert redact(out) == out  # idempotent


@pytest.mark.parametrize("case", CASES)
def test_redacted_json_stays_json(case: Case) -> None:
    document = {"command": ["sh", "-c", f'echo "{case.text}"'], "env": {"X": case.text}}
    for text in (json.dumps(document), json.dumps(document, indent=2)):
        redacted = json.loads(redact(text))
        if case.secret:
            assert case.secret not in json.dumps(redacted)


def test_redact_bytes_keeps_bytes_that_are_not_utf8() -> None:
    data = b"\xff\xfe progress \r token gpt_abc123_SeCrEt-SeCrEt-1\n"
    assert redact_bytes(data) == b"\xff\xfe progress \r token gpt_abc123_" + MASK.encode() + b"\n"


def test_redact_obj_walks_json_values() -> None:
    body = {"message": "bad url https://h/x?sig=s3cr3t", "details": [{"value": "Bearer t0k3n"}, 3]}
    assert redact_obj(body) == {
        "message": f"bad url https://h/x?sig={MASK}",
        "details": [{"value": f"Bearer {MASK}"}, 3],
    }


def test_filter_redacts_arguments_and_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("gpupool.test.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("fetching %s", "https://h/x?gp_sig=argsecret")
        try:
            raise RuntimeError("Authorization: Bearer excsecret")
        except RuntimeError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert "argsecret" not in text and "excsecret" not in text
    assert f"gp_sig={MASK}" in text and "RuntimeError" in text


@dataclass(frozen=True)
class RecordCase:
    msg: object
    args: tuple[object, ...]
    expected: str
    keeps_args: bool = True


class Url:
    def __str__(self) -> str:
        return "https://h/x?gp_sig=objsecret"


RECORD_CASES = [
    pytest.param(
        RecordCase(
            "%s - %s %d", ("1.2.3.4", "GET /a?sig=s3cr3t", 200), f"1.2.3.4 - GET /a?sig={MASK} 200"
        ),
        id="access log arguments stay arguments",
    ),
    pytest.param(
        RecordCase(
            "HTTP Request: %s %s", ("GET", Url()), f"HTTP Request: GET https://h/x?gp_sig={MASK}"
        ),
        id="an object argument is redacted when formatted",
    ),
    pytest.param(
        RecordCase("%s?sig=%s", ("https://h/x", "splitsecret"), f"https://h/x?sig={MASK}", False),
        id="a secret split between format and argument",
    ),
    pytest.param(
        RecordCase(RuntimeError("Bearer excsecret"), (), f"Bearer {MASK}"),
        id="an exception logged as the message",
    ),
]


@pytest.mark.parametrize("case", RECORD_CASES)
def test_record_redaction(case: RecordCase) -> None:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, case.msg, case.args, None)
    RedactingFilter().filter(record)
    assert record.getMessage() == case.expected
    assert (record.args is not None and len(record.args) > 0) == (
        case.keeps_args and bool(case.args)
    )


def test_stream_catches_a_secret_split_over_writes() -> None:
    raw = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", write_through=True)
    stream = RedactingTextStream(raw)
    stream.write("url https://h/x?si")
    stream.flush()
    stream.write("g=spl")
    assert stream.buffer is not None
    stream.buffer.write(b"it\nbytes sig=binsecret")
    stream.write(" and more\n")
    stream.close_lines()
    written = raw.buffer.getvalue().decode()  # type: ignore[attr-defined]
    assert "spl" not in written and "binsecret" not in written
    assert written == f"url https://h/x?sig={MASK}\nbytes sig={MASK} and more\n"


def test_redacting_streams_restores_the_originals(capsys: pytest.CaptureFixture[str]) -> None:
    before = sys.stdout
    with redacting_streams():
        print("token gpt_abc123_SeCrEtSeCrEt", end="")  # no newline: held, then drained
        print("err Bearer x1y2z3", file=sys.stderr)
    assert sys.stdout is before
    out, err = capsys.readouterr()
    assert out == f"token gpt_abc123_{MASK}"
    assert err == f"err Bearer {MASK}\n"
