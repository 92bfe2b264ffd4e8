"""The dashboard's signed cookies: what verifies, what does not, and the CSRF tokens."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpupool.server.ui.sessions import MAX_AGE_S, PRE_AGE_S, SessionCodec

KEY = b"k" * 32
NOW = 1_800_000_000


class Clock:
    def __init__(self) -> None:
        self.now = float(NOW)

    def __call__(self) -> float:
        return self.now


def codec(clock: Clock | None = None, key: bytes = KEY) -> SessionCodec:
    return SessionCodec(key, clock or Clock())


def forged(cookie: str, **changes: Any) -> str:
    """The cookie with its payload changed and its signature kept."""
    body, mac = cookie.split(".")
    label, payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload.update(changes)
    text = base64.urlsafe_b64encode(json.dumps([label, payload]).encode()).rstrip(b"=").decode()
    return f"{text}.{mac}"


def test_a_session_round_trips_and_holds_no_secret() -> None:
    made = codec().new("alice", "token", "abc123", (), None)
    cookie = codec().dump(made)
    assert codec().load(cookie) == made
    assert made.expires == NOW + MAX_AGE_S


def test_an_oidc_session_ends_with_its_token() -> None:
    made = codec().new("dave", "oidc", "jwt:1", ("TeamA",), NOW + 600)
    assert made.expires == NOW + 600
    assert codec().load(codec().dump(made)) == made


@dataclass
class Bad:
    cookie: str
    why: str


def _bad_cookies() -> list[Any]:
    good = codec().dump(codec().new("alice", "token", "abc123", (), None))
    pre, _ = codec().pre_session()
    return [
        pytest.param(Bad(forged(good, u="admin"), "payload changed"), id="forged user"),
        pytest.param(Bad(good[:-2] + "AA", "signature changed"), id="forged signature"),
        pytest.param(
            Bad(codec(key=b"x" * 32).dump(codec().new("alice", "token", "t", (), None)), "key"),
            id="another server's key",
        ),
        pytest.param(Bad(pre, "a pre-session cookie is no session"), id="another label"),
        pytest.param(Bad("", "empty"), id="empty"),
        pytest.param(Bad("not.a.cookie", "shape"), id="three parts"),
        pytest.param(Bad("x" * 9000, "too long"), id="too long"),
    ]


@pytest.mark.parametrize("case", _bad_cookies())
def test_anything_that_does_not_verify_is_no_session(case: Bad) -> None:
    assert codec().load(case.cookie) is None, case.why


def test_a_session_expires() -> None:
    clock = Clock()
    cookie = codec(clock).dump(codec(clock).new("alice", "token", "t", (), None))
    clock.now += MAX_AGE_S
    assert codec(clock).load(cookie) is None


def test_a_logged_out_session_is_refused_by_its_codec() -> None:
    sessions = codec()
    made = sessions.new("alice", "token", "t", (), None)
    cookie = sessions.dump(made)
    sessions.revoked.add(made.sid, made.expires)
    assert sessions.load(cookie) is None


def test_csrf_tokens_belong_to_one_session() -> None:
    sessions = codec()
    one, two = (sessions.new("alice", "token", "t", (), None) for _ in range(2))
    token = sessions.csrf(one.sid)
    assert sessions.csrf_ok(one.sid, token)
    assert not sessions.csrf_ok(two.sid, token)
    assert not sessions.csrf_ok(one.sid, None)
    assert not sessions.csrf_ok(one.sid, "")
    assert not codec(key=b"x" * 32).csrf_ok(one.sid, token)


def test_the_oidc_round_trip_cookie_expires_after_the_sign_in_window() -> None:
    clock = Clock()
    cookie = codec(clock).oidc_flow("state", "verifier", "/ui/jobs")
    flow = codec(clock).oidc_flow_of(cookie)
    assert flow is not None and (flow["state"], flow["next"]) == ("state", "/ui/jobs")
    clock.now += PRE_AGE_S
    assert codec(clock).oidc_flow_of(cookie) is None


def test_a_session_keeps_the_groups_that_fit_or_those_that_give_a_role() -> None:
    from gpupool.server.ui.signin import kept_groups
    from gpupool.spec.load import load_config

    config = load_config(Path(__file__).resolve().parents[3] / "examples" / "demo.yaml")
    few = frozenset({"TeamA", "Staff"})
    assert kept_groups(few, config) == ("Staff", "TeamA")
    many = frozenset({f"group-{n:04d}-of-a-large-directory" for n in range(200)} | {"TeamB"})
    assert kept_groups(many, config) == ("TeamB",)
    made = codec().new("dave", "oidc", "jwt:1", kept_groups(many, config), None)
    assert len(codec().dump(made)) < 4000
