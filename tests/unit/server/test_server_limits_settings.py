"""Server limits from the environment, and the whole-line redaction the log routes use."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupool.config import LIMIT_VARIABLES, ServerLimits, load_limits
from gpupool.core.errors import ConfigInvalid
from gpupool.data.redaction import redact_bytes, redact_lines


@dataclass(frozen=True)
class Env:
    env: dict[str, str]
    want: ServerLimits


LIMITS = [
    pytest.param(Env({}, ServerLimits()), id="nothing set: the defaults"),
    pytest.param(
        Env({"GPUPOOL_MAX_BODY_BYTES": "2048"}, ServerLimits(max_body_bytes=2048)),
        id="an integer limit",
    ),
    pytest.param(
        Env({"GPUPOOL_HEADER_TIMEOUT_S": " 2.5 "}, ServerLimits(header_timeout_s=2.5)),
        id="a number of seconds",
    ),
    pytest.param(
        Env({"GPUPOOL_LOG_FOLLOWERS_PER_USER": ""}, ServerLimits()), id="empty: the default"
    ),
]


@pytest.mark.parametrize("case", LIMITS)
def test_limits_come_from_the_environment(case: Env) -> None:
    assert load_limits(case.env) == case.want


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        pytest.param("GPUPOOL_MAX_BODY_BYTES", "1.5", id="a fraction where bytes are counted"),
        pytest.param("GPUPOOL_MAX_ENV_BYTES", "0", id="zero"),
        pytest.param("GPUPOOL_BODY_TIMEOUT_S", "-1", id="negative"),
        pytest.param("GPUPOOL_HEADER_TIMEOUT_S", "nan", id="not a number"),
        pytest.param("GPUPOOL_AUDIT_SUMMARY_S", "soon", id="a word"),
    ],
)
def test_a_bad_limit_is_refused_naming_its_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigInvalid, match=variable):
        load_limits({variable: value})


def test_every_limit_has_a_variable() -> None:
    assert set(LIMIT_VARIABLES) == set(ServerLimits.__dataclass_fields__)


LINES = st.lists(
    st.sampled_from([b"plain text", b"url?gp_m=PUT&gp_sig=SECRET123", b"", b"x" * 30]),
    min_size=1,
    max_size=6,
)


@given(LINES, st.lists(st.integers(min_value=0, max_value=400), max_size=6))
def test_line_redaction_masks_secrets_wherever_the_reads_are_cut(
    lines: list[bytes], cuts: list[int]
) -> None:
    """Fed in pieces as a follower reads them, no signature comes out unmasked, and the
    text is otherwise whole."""
    text = b"\n".join(lines) + b"\n"
    bounds = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    out, pending = b"", b""
    for start, end in itertools.pairwise(bounds):
        done, used = redact_lines(pending + text[start:end])
        out, pending = out + done, (pending + text[start:end])[used:]
    out += redact_lines(pending, final=True)[0]
    assert b"SECRET123" not in out
    assert out == redact_bytes(text)


def test_a_signature_split_over_two_reads_is_masked() -> None:
    first, used = redact_lines(b"start\nurl?gp_sig=AAAA")
    rest = b"url?gp_sig=AAAA"[: len(b"start\nurl?gp_sig=AAAA") - used] + b"BBBB\n"
    second, _ = redact_lines(rest)
    assert first == b"start\n"
    assert second == b"url?gp_sig=[REDACTED]\n"
