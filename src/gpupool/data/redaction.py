"""Keep secrets out of everything gpupool writes (D4, docs/architecture.md §8).

:func:`redact` masks every credential shape gpupool knows: signed-URL signatures (Azure SAS
``sig=``, S3 ``X-Amz-Signature=`` and ``X-Amz-Credential=``, gpupool's own ``gp_sig=``),
``Authorization`` headers, bearer tokens, JWTs, gpupool API tokens (the id is kept, it names
the token in audit records; the secret is masked), storage account keys and URL passwords.

It is applied at every exit:

* **Logs**: :func:`install_logging` sets a log record factory, so every record of every logger
  (ours, uvicorn's, httpx's, a library's) is redacted when it is made, whatever handler later
  writes it; :class:`RedactingFilter` is also put on the root's handlers and in uvicorn's
  logging config (:func:`uvicorn_log_config`) for records made before the factory was set.
  The SDK, a library, only filters the loggers it makes write (:func:`protect_loggers`).
* **Streams**: :func:`redacting_streams` wraps ``sys.stdout``/``sys.stderr`` (text and their
  binary ``buffer``) for CLI output. Text is redacted a whole line at a time, so a secret split
  over two writes is still caught; a partial line is held until its end or until the streams
  are closed. The API's job logs (``GET /v1/jobs/{id}/logs``, plain and followed) pass
  :func:`redact_lines`, the same whole-line redaction, so a viewer reading a job's output
  through the API sees what the CLI would print.
* **Bodies**: event messages and error bodies call :func:`redact` directly.

Invariants: redaction is idempotent (``redact(redact(x)) == redact(x)``); it keeps JSON valid
(a masked value never swallows a quote or a backslash escape: ``--json`` output stays
parseable); it keeps the parameter or header name so that a reader still sees *that* a
credential was there.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import Callable, Iterator
from typing import IO, Any

MASK = "[REDACTED]"

# A query value ends at the next separator, quote, whitespace or backslash (JSON escapes);
# ``%26`` is an encoded ``&`` when the whole URL sits inside another URL's query.
_VALUE = r"(?:(?!%26)[^&\s\"'<>\\,;])+"

_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    # Signed-URL query parameters, also URL-encoded (name%3Dvalue).
    (
        re.compile(
            r"(?i)(?:(?<![A-Za-z0-9_-])|(?<=%3F)|(?<=%26))"
            r"(gp_sig|sig|x-amz-signature|x-amz-credential|x-amz-security-token"
            r"|x-goog-signature|x-goog-credential|signature)(=|%3D)" + _VALUE
        ),
        rf"\1\2{MASK}",
    ),
    # Authorization headers, in HTTP, curl -H, Python reprs and JSON: the whole value.
    (
        re.compile(
            r"(?i)(authorization[\"']?\s*+[:=]\s*+[\"']?)(?!\[REDACTED"
            r"|(?:bearer\s+)?<[A-Za-z _-]+>(?=[\"'\s]|$))"
            r"[^\"'\\\r\n,}]+"
        ),
        rf"\1{MASK}",
    ),
    # Bearer tokens wherever they appear (e.g. a header repr without its name).
    # (Not the words of "a bearer token" or "bearer scheme": hints stay readable.)
    (
        re.compile(
            r"(?i)\b(bearer\s+)(?!\[REDACTED|(?:tokens?|scheme|auth\w*)\b)[A-Za-z0-9._~+/=-]+"
        ),
        rf"\1{MASK}",
    ),
    # JWTs: three base64url parts, the first two JSON objects ("eyJ" is '{"').
    (re.compile(r"\beyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*"), f"{MASK}-jwt"),
    # gpupool API tokens gpt_<id>_<secret>: the id names the token; the secret goes.
    (re.compile(r"\b(gpt_[A-Za-z0-9]+_)(?!\[REDACTED)[A-Za-z0-9_-]{8,}"), rf"\1{MASK}"),
    # Connection strings: Azure storage keys and SAS tokens, generic key=value secrets.
    (
        re.compile(
            r"(?i)\b(AccountKey|SharedAccessSignature|SharedAccessKey|client_secret"
            r"|aws_secret_access_key|password|passwd|secret_key)(\s*+[=:]\s*+)(?!\[REDACTED)"
            r"[^;&\s\"'\\]+"
        ),
        rf"\1\2{MASK}",
    ),
    # Variables and fields named like a secret (FOO_TOKEN=..., "client_secret": "..."): the
    # name must end in the keyword (not "tokenizer=") and the value hold a letter (not
    # "max_tokens=512"); a value already masked by a rule above is left as it is.
    (
        re.compile(
            r"(?i)(?<![A-Za-z0-9])([A-Za-z0-9_.-]*(?:token|secret|password|passwd|bearer"
            r"|api_?key|access_?key|private_?key|account_?key|credential)s?)"
            r"(\\?[\"']?\s*+[:=]\s*+\\?[\"']?)(?!\[REDACTED)(?=[^\s\"'\\,;&\[]*[A-Za-z])"
            r"[^\s\"'\\,;&\[]{8,}+(?!\[)"
        ),
        rf"\1\2{MASK}",
    ),
    # Passwords in URLs: scheme://user:password@host.
    (
        re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?!\[REDACTED)[^@/\s\"'\\]+(@)"),
        rf"\1{MASK}\2",
    ),
)


def redact(text: str) -> str:
    """``text`` with every known credential masked (see the module docstring)."""
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text


def redact_bytes(data: bytes) -> bytes:
    """:func:`redact` over bytes; bytes that are not UTF-8 pass through unchanged."""
    return redact(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def redact_obj(value: Any) -> Any:
    """Strings anywhere in a JSON-like value redacted (error ``details``, event payloads)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_obj(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_obj(v) for v in value]
    return value


# -- logging ---------------------------------------------------------------------------------


class _Redacted:
    """An argument of a log record shown only through :func:`redact`, whatever the format
    (``%s``, ``%r``, ``{}``): e.g. httpx logs a URL object, whose query may hold a signature."""

    __slots__ = ("_value",)

    def __init__(self, value: object) -> None:
        self._value = value

    def __str__(self) -> str:
        return redact(str(self._value))

    def __repr__(self) -> str:
        return redact(repr(self._value))

    def __format__(self, spec: str) -> str:
        return redact(format(self._value, spec))


def _redact_arg(value: object) -> object:
    if isinstance(value, str):
        return redact(value)
    if value is None or isinstance(value, int | float | _Redacted):
        return value  # numbers keep working with %d and %f
    return _Redacted(value)


def redact_record(record: logging.LogRecord) -> logging.LogRecord:
    """Redact the record's message, arguments and traceback in place. Idempotent.

    Arguments are redacted one by one and stay arguments, because some formatters read them
    (uvicorn's access log unpacks ``record.args``). Where that is not enough (a secret split
    between the format string and an argument, or a format that breaks) the message is
    formatted now and redacted whole.
    """
    if getattr(record, "gpupool_redacted", False):
        return record
    msg, args = record.msg, record.args
    try:
        record.msg = redact(msg) if isinstance(msg, str) else _Redacted(msg)
        if isinstance(args, tuple):
            record.args = tuple(_redact_arg(a) for a in args)
        elif isinstance(args, dict):
            record.args = {k: _redact_arg(v) for k, v in args.items()}
        message = record.getMessage()
        if redact(message) != message:
            raise ValueError("a secret spans the format string and its arguments")
    except Exception:
        record.msg, record.args = msg, args
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: keep what there is, redacted
            message = f"{msg!s} {args!r}"
        record.msg, record.args = redact(message), None
    if record.exc_info and not record.exc_text:
        record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
        record.exc_text = redact(record.exc_text)
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
    record.gpupool_redacted = True
    return record


class RedactingFilter(logging.Filter):
    """A filter that redacts rather than drops: put it on a handler (covers every record the
    handler writes) or a logger (covers records logged to that logger by name)."""

    def filter(self, record: logging.LogRecord) -> bool:
        redact_record(record)
        return True


_FILTER = RedactingFilter()


def _redacting_factory(make: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        return redact_record(make(*args, **kwargs))

    factory.gpupool_redacting = True  # type: ignore[attr-defined]
    return factory


def install_logging() -> None:
    """Redact every log record of this process from now on. Idempotent; call it after
    configuring handlers (``logging.basicConfig``) so that they get the filter too."""
    current = logging.getLogRecordFactory()
    if not getattr(current, "gpupool_redacting", False):
        logging.setLogRecordFactory(_redacting_factory(current))
    loggers = [logging.getLogger()] + [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger)
    ]
    for logger in loggers:
        for handler in logger.handlers:
            if _FILTER not in handler.filters:
                handler.addFilter(_FILTER)


def protect_loggers(*names: str) -> None:
    """Put :class:`RedactingFilter` on the named loggers (records logged to them by name),
    for a library that must not change the process's logging, like the SDK: httpx logs
    every request URL at INFO, and a signed URL's signature is in its query. Idempotent."""
    for name in names:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)


def uvicorn_log_config() -> dict[str, Any]:
    """uvicorn's own logging config with :class:`RedactingFilter` on each of its handlers
    (uvicorn replaces its handlers at start, so a filter added before would be lost)."""
    import copy

    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["redact"] = {"()": f"{__name__}.RedactingFilter"}
    for handler in config.get("handlers", {}).values():
        handler.setdefault("filters", []).append("redact")
    return config


# -- streams ---------------------------------------------------------------------------------

_LINE_END = re.compile(rb"[\r\n]")
_HOLD_MAX = 1 << 16  # a "line" longer than this is redacted and written in pieces


def redact_lines(data: bytes, final: bool = False) -> tuple[bytes, int]:
    """Redact the whole lines at the start of ``data`` (bytes as :func:`redact_bytes`).

    Returns the redacted bytes and how many bytes of ``data`` they cover; a partial last
    line is left out, for the caller to pass again with what follows it, so that a secret
    split over two reads is still caught. It is taken too when ``final`` (nothing follows)
    or when ``data`` holds no line end at all and is longer than 64 KiB (such a "line" is
    redacted in pieces), as :func:`redacting_streams` does.
    """
    cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
    if final or (cut == 0 and len(data) > _HOLD_MAX):
        cut = len(data)
    return (redact_bytes(data[:cut]) if cut else b""), cut


class _LineRedactor:
    """Bytes in, redacted bytes out, whole lines at a time."""

    def __init__(self, write: Callable[[bytes], object]) -> None:
        self._write = write
        self._pending = b""

    def feed(self, data: bytes) -> None:
        data = self._pending + data
        cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
        if cut == 0 and len(data) > _HOLD_MAX:
            cut = len(data)
        self._pending = data[cut:]
        if cut:
            self._write(redact_bytes(data[:cut]))

    def drain(self) -> None:
        """Write the held partial line (the stream ends, or the other layer writes)."""
        if self._pending:
            data, self._pending = self._pending, b""
            self._write(redact_bytes(data))


class RedactingBinaryStream:
    """A binary stream wrapper (``sys.stdout.buffer``) that writes redacted lines."""

    def __init__(self, raw: IO[bytes], lines: _LineRedactor | None = None) -> None:
        self._raw = raw
        self.lines = lines or _LineRedactor(raw.write)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if isinstance(data, str):
            raise TypeError("write() argument must be bytes, not str")
        self.lines.feed(bytes(data))
        return len(data)

    def flush(self) -> None:
        self._raw.flush()  # a held partial line stays held: it may end in a secret

    def close_lines(self) -> None:
        self.lines.drain()
        self._raw.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class RedactingTextStream:
    """A text stream wrapper (``sys.stdout``) that writes redacted lines. Text and its
    ``buffer`` share one line buffer, so their order is kept and a line written partly
    through each is still redacted whole."""

    def __init__(self, raw: IO[str]) -> None:
        self._raw = raw
        self._encoding = getattr(raw, "encoding", None) or "utf-8"
        self._errors = getattr(raw, "errors", None) or "strict"
        raw_buffer: IO[bytes] | None = getattr(raw, "buffer", None)
        if raw_buffer is not None:
            sink = raw_buffer.write
            self.buffer: RedactingBinaryStream | None = RedactingBinaryStream(
                raw_buffer, _LineRedactor(self._to_buffer)
            )
            self._lines = self.buffer.lines
            self._sink_buffer = sink
        else:
            self.buffer = None
            self._lines = _LineRedactor(self._to_text)

    def _to_buffer(self, data: bytes) -> None:
        self._raw.flush()  # anything in the text layer first
        self._sink_buffer(data)

    def _to_text(self, data: bytes) -> None:
        self._raw.write(data.decode(self._encoding, "surrogateescape"))

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._lines.feed(text.encode(self._encoding, self._errors))
        return len(text)

    def writelines(self, lines: list[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._raw.flush()
        if self.buffer is not None:
            self.buffer.flush()

    def close_lines(self) -> None:
        self._lines.drain()
        self.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


@contextlib.contextmanager
def redacting_streams() -> Iterator[None]:
    """Redact everything written to ``sys.stdout`` and ``sys.stderr`` inside the block."""
    saved = sys.stdout, sys.stderr
    wrapped = RedactingTextStream(saved[0]), RedactingTextStream(saved[1])
    sys.stdout, sys.stderr = wrapped
    try:
        yield
    finally:
        for stream in wrapped:
            with contextlib.suppress(ValueError, OSError):  # the stream was closed
                stream.close_lines()
        sys.stdout, sys.stderr = saved
