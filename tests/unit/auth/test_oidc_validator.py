"""OIDC token validation with a local key pair: what is accepted, what is refused and why."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from gpupool.auth.oidc import OidcValidator
from gpupool.config import OidcSettings, load_oidc
from gpupool.core.errors import ConfigInvalid, Unauthenticated

ISSUER = "https://idp.example.com/realms/corp"
AUDIENCE = "gpupool"
RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


class LocalKeys:
    """The issuer's JWKS, served from memory: kid "rsa" and kid "ec"."""

    def __init__(self) -> None:
        self._jwks = {
            "rsa": jwt.PyJWK(json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(RSA_KEY.public_key()))),
            "ec": jwt.PyJWK(json.loads(jwt.algorithms.ECAlgorithm.to_jwk(EC_KEY.public_key()))),
        }

    def get_signing_key_from_jwt(self, token: str) -> jwt.PyJWK:
        kid = jwt.get_unverified_header(token).get("kid")
        if kid not in self._jwks:
            raise jwt.PyJWKClientError(f"no key {kid}")
        return self._jwks[kid]


def claims(**overrides: Any) -> dict[str, Any]:
    now = int(time.time())
    base: dict[str, Any] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "00u1a2b3",
        "preferred_username": "dave",
        "groups": ["TeamA", "Everyone"],
        "iat": now,
        # The cases are built when the module is collected, which may be long before they run
        # in a full suite: a day, not minutes, so that only the "expired" case has expired.
        "exp": now + 86_400,
        "jti": "abc-123",
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


@dataclass
class Case:
    token: str
    want_user: str | None = None  # None: refused
    want_groups: frozenset[str] = frozenset()
    want_message: str = ""
    settings: dict[str, Any] = field(default_factory=dict)


def signed(alg: str = "RS256", kid: str = "rsa", key: Any = RSA_KEY, **overrides: Any) -> str:
    return jwt.encode(claims(**overrides), key, algorithm=alg, headers={"kid": kid})


def unsigned(**overrides: Any) -> str:
    return jwt.encode(claims(**overrides), None, algorithm="none", headers={"kid": "rsa"})


CASES = [
    pytest.param(Case(signed(), "dave", frozenset({"TeamA", "Everyone"})), id="valid RS256 token"),
    pytest.param(
        Case(signed("ES256", "ec", EC_KEY), "dave", frozenset({"TeamA", "Everyone"})),
        id="valid ES256 token",
    ),
    pytest.param(
        Case(signed(preferred_username=None, groups=None), "00u1a2b3"),
        id="no username claim: falls back to sub",
    ),
    pytest.param(
        Case(
            signed(roles="TeamB Other"),
            "dave",
            frozenset({"TeamB", "Other"}),
            settings={"groups_claim": "roles"},
        ),
        id="groups claim name and space-separated groups",
    ),
    pytest.param(
        Case(signed(exp=int(time.time()) - 120), want_message="has expired"), id="expired"
    ),
    pytest.param(
        Case(signed(aud="another-app"), want_message="not meant for this server"),
        id="wrong audience",
    ),
    pytest.param(
        Case(signed(iss="https://evil.example.com"), want_message="not issued by"),
        id="wrong issuer",
    ),
    pytest.param(Case(unsigned(), want_message="algorithm 'none'"), id="alg none"),
    pytest.param(
        Case(
            signed("HS256", key=b"the-issuer-public-key-as-a-secret"),
            want_message="algorithm 'HS256'",
        ),
        id="HS256 (key confusion) refused",
    ),
    pytest.param(
        Case(
            signed("ES256", "ec", EC_KEY),
            want_message="not accepted",
            settings={"algorithms": ("RS256",)},
        ),
        id="algorithm outside the allow-list",
    ),
    pytest.param(
        Case(signed(key=OTHER_RSA_KEY), want_message="Signature"), id="signed by another key"
    ),
    pytest.param(Case(signed(kid="rotated-away"), want_message="signing key"), id="unknown key id"),
    pytest.param(Case(signed(exp=None), want_message="'exp'"), id="no expiry"),
    pytest.param(
        Case(signed(nbf=int(time.time()) + 86_400), want_message="Immature"), id="not valid yet"
    ),
    pytest.param(Case("a.b.c", want_message="well-formed"), id="garbage"),
]


@pytest.mark.parametrize("case", CASES)
def test_validate(case: Case) -> None:
    settings = OidcSettings(issuer=ISSUER, audience=AUDIENCE, **case.settings)
    validator = OidcValidator(settings, keys=LocalKeys())
    if case.want_user is None:
        with pytest.raises(Unauthenticated) as refused:
            validator.validate(case.token)
        assert case.want_message in refused.value.message
        assert case.token not in refused.value.message
        return
    identity = validator.validate(case.token)
    assert (identity.user, identity.groups) == (case.want_user, case.want_groups)
    assert identity.token_id == "jwt:abc-123"


def test_discovery_names_the_jwks() -> None:
    fetched: list[str] = []

    def fetch(url: str) -> dict[str, Any]:
        fetched.append(url)
        return {"issuer": ISSUER, "jwks_uri": ISSUER + "/keys"}

    validator = OidcValidator(OidcSettings(ISSUER, AUDIENCE), fetch=fetch)
    assert validator._discover_jwks_url() == ISSUER + "/keys"
    assert fetched == [ISSUER + "/.well-known/openid-configuration"]


@dataclass
class EnvCase:
    env: dict[str, str]
    want: OidcSettings | None = None
    want_error: str = ""


ENV_CASES = [
    pytest.param(EnvCase({}), id="off without an issuer"),
    pytest.param(
        EnvCase(
            {"GPUPOOL_OIDC_ISSUER": ISSUER + "/", "GPUPOOL_OIDC_AUDIENCE": AUDIENCE},
            OidcSettings(ISSUER, AUDIENCE),
        ),
        id="defaults",
    ),
    pytest.param(
        EnvCase({"GPUPOOL_OIDC_ISSUER": ISSUER}, want_error="GPUPOOL_OIDC_AUDIENCE"),
        id="audience required",
    ),
    pytest.param(
        EnvCase(
            {
                "GPUPOOL_OIDC_ISSUER": ISSUER,
                "GPUPOOL_OIDC_AUDIENCE": AUDIENCE,
                "GPUPOOL_OIDC_ALGORITHMS": "RS256,HS256",
            },
            want_error="'HS256'",
        ),
        id="HMAC refused",
    ),
    pytest.param(
        EnvCase(
            {
                "GPUPOOL_OIDC_ISSUER": ISSUER,
                "GPUPOOL_OIDC_AUDIENCE": AUDIENCE,
                "GPUPOOL_OIDC_ALGORITHMS": "none",
            },
            want_error="'none'",
        ),
        id="none refused",
    ),
]


@pytest.mark.parametrize("case", ENV_CASES)
def test_settings_from_environment(case: EnvCase) -> None:
    if case.want_error:
        with pytest.raises(ConfigInvalid, match=case.want_error):
            load_oidc(case.env)
    else:
        assert load_oidc(case.env) == case.want
