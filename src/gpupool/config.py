"""Process settings: the one place environment variables are read (docs/architecture.md §3).

Everything else receives a :class:`Settings` value. The cluster configuration (teams,
pools, quotas) is a different thing: it is a YAML file, see ``gpupool.spec``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.core.errors import ConfigInvalid

DEFAULT_URL = "http://127.0.0.1:8080"
ROLES = ("all", "api", "controller")
OIDC_ALGORITHMS = ("RS256", "ES256")
# offline_access: a refresh token, so a signed-in user is not asked again every hour.
DEFAULT_CLI_SCOPE = "openid profile offline_access"


@dataclass(frozen=True)
class OidcSettings:
    """Accepting OIDC bearer JWTs besides API tokens (T2); on when an issuer is set.

    ``GPUPOOL_OIDC_ISSUER`` (required), ``GPUPOOL_OIDC_AUDIENCE`` (required: the ``aud``
    tokens must carry), ``GPUPOOL_OIDC_GROUPS_CLAIM`` (default ``groups``),
    ``GPUPOOL_OIDC_USERNAME_CLAIM`` (default ``preferred_username``, falling back to
    ``sub``), ``GPUPOOL_OIDC_ALGORITHMS`` (comma-separated, default ``RS256,ES256``) and
    ``GPUPOOL_OIDC_JWKS_URL`` (default: the issuer's discovery document says).

    ``GPUPOOL_OIDC_UID_CLAIM`` and ``GPUPOOL_OIDC_GID_CLAIM`` (both, or neither), and
    ``GPUPOOL_OIDC_GROUPS_GID_CLAIM`` (optional): the claims that carry the user's POSIX
    identity (say ``uidNumber``, ``gidNumber``), for users not under ``users:`` nor in the
    directory file (``auth.posix``). Unset, tokens give no identity.

    ``gpupool login`` signs users in with the provider's device flow as the public client
    ``GPUPOOL_OIDC_CLIENT_ID`` (optional: without it users pass ``--client-id``), asking for
    ``GPUPOOL_OIDC_CLI_SCOPE`` (default ``openid profile offline_access``; a provider that
    derives the audience from the scope, such as Entra ID, needs the API's scope here).
    """

    issuer: str
    audience: str
    groups_claim: str = "groups"
    username_claim: str = "preferred_username"
    algorithms: tuple[str, ...] = OIDC_ALGORITHMS
    jwks_url: str | None = None
    client_id: str | None = None
    cli_scope: str = DEFAULT_CLI_SCOPE
    uid_claim: str | None = None
    gid_claim: str | None = None
    groups_gid_claim: str | None = None


def load_oidc(env: Mapping[str, str]) -> OidcSettings | None:
    issuer = env.get("GPUPOOL_OIDC_ISSUER", "").strip()
    if not issuer:
        return None
    audience = env.get("GPUPOOL_OIDC_AUDIENCE", "").strip()
    if not audience:
        raise ConfigInvalid(
            "GPUPOOL_OIDC_AUDIENCE is not set: with GPUPOOL_OIDC_ISSUER set it must name the "
            "audience (aud) your identity provider puts in tokens for gpupool"
        )
    algorithms = tuple(
        a.strip() for a in env.get("GPUPOOL_OIDC_ALGORITHMS", ",".join(OIDC_ALGORITHMS)).split(",")
    )
    unsafe = [a for a in algorithms if not a or a.lower() == "none" or a.upper().startswith("HS")]
    if unsafe:
        raise ConfigInvalid(
            f"GPUPOOL_OIDC_ALGORITHMS may not contain {', '.join(map(repr, unsafe))}: only "
            "asymmetric algorithms (RS256, ES256, PS256, ...) can be checked against the JWKS"
        )
    uid_claim = env.get("GPUPOOL_OIDC_UID_CLAIM", "").strip() or None
    gid_claim = env.get("GPUPOOL_OIDC_GID_CLAIM", "").strip() or None
    if (uid_claim is None) != (gid_claim is None):
        raise ConfigInvalid(
            "set both GPUPOOL_OIDC_UID_CLAIM and GPUPOOL_OIDC_GID_CLAIM (the claims carrying a "
            "user's uid and gid), or neither"
        )
    return OidcSettings(
        issuer=issuer.rstrip("/"),
        audience=audience,
        groups_claim=env.get("GPUPOOL_OIDC_GROUPS_CLAIM", "").strip() or "groups",
        username_claim=env.get("GPUPOOL_OIDC_USERNAME_CLAIM", "").strip() or "preferred_username",
        algorithms=algorithms,
        jwks_url=env.get("GPUPOOL_OIDC_JWKS_URL", "").strip() or None,
        client_id=env.get("GPUPOOL_OIDC_CLIENT_ID", "").strip() or None,
        cli_scope=" ".join(env.get("GPUPOOL_OIDC_CLI_SCOPE", "").split()) or DEFAULT_CLI_SCOPE,
        uid_claim=uid_claim,
        gid_claim=gid_claim,
        groups_gid_claim=env.get("GPUPOOL_OIDC_GROUPS_GID_CLAIM", "").strip() or None,
    )


KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


@dataclass(frozen=True)
class ServerLimits:
    """What one client may make the API server hold or do (sizes, streams, slow clients).

    Each has a ``GPUPOOL_*`` variable (see :data:`LIMIT_VARIABLES`). Sizes are bytes of
    UTF-8; a request past a size limit is answered 413 (the whole body) or 422 naming the
    field and the limit, before anything is stored.
    """

    # The body of any JSON request (submits, cancels): refused on its Content-Length, or
    # while it streams, before it is parsed.
    max_body_bytes: int = 1 * MIB
    # One artifact PUT through a signed URL (streamed to disk, so a separate, larger cap).
    max_artifact_bytes: int = 10 * GIB
    # A submit's env: the number of variables and the bytes of all names and values.
    max_env_entries: int = 256
    max_env_bytes: int = 64 * KIB
    # A submit's command: the number of arguments (the wire schema never takes more than
    # 4096) and the bytes of all of them.
    max_command_args: int = 4096
    max_command_bytes: int = 256 * KIB
    # Declared inputs, and declared outputs, each.
    max_data_paths: int = 256
    # Tasks of one job array (``submit --array``): all are stored in one transaction.
    max_array_tasks: int = 10_000
    # Concurrent ``logs?follow=true`` streams of one user; more are answered 429.
    log_followers_per_user: int = 8
    # A request's line and headers must arrive within this many seconds of its first byte
    # (or of the connection), and its body may pause at most this long: slow clients cannot
    # hold connections (and file descriptors) open forever.
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    # Mutating requests refused without any identity (no or a bad token, a bad signed URL)
    # are counted, and written as one audit row per route and outcome this often.
    audit_summary_s: float = 60.0


# ServerLimits field -> the environment variable that sets it.
LIMIT_VARIABLES = {
    "max_body_bytes": "GPUPOOL_MAX_BODY_BYTES",
    "max_artifact_bytes": "GPUPOOL_MAX_ARTIFACT_BYTES",
    "max_env_entries": "GPUPOOL_MAX_ENV_ENTRIES",
    "max_env_bytes": "GPUPOOL_MAX_ENV_BYTES",
    "max_command_args": "GPUPOOL_MAX_COMMAND_ARGS",
    "max_command_bytes": "GPUPOOL_MAX_COMMAND_BYTES",
    "max_data_paths": "GPUPOOL_MAX_DATA_PATHS",
    "max_array_tasks": "GPUPOOL_MAX_ARRAY_TASKS",
    "log_followers_per_user": "GPUPOOL_LOG_FOLLOWERS_PER_USER",
    "header_timeout_s": "GPUPOOL_HEADER_TIMEOUT_S",
    "body_timeout_s": "GPUPOOL_BODY_TIMEOUT_S",
    "audit_summary_s": "GPUPOOL_AUDIT_SUMMARY_S",
}


def load_limits(env: Mapping[str, str]) -> ServerLimits:
    """:class:`ServerLimits` from the environment; each unset variable keeps its default."""
    defaults = ServerLimits()
    values: dict[str, int | float] = {}
    for name, variable in LIMIT_VARIABLES.items():
        raw = env.get(variable, "").strip()
        if not raw:
            continue
        kind = type(getattr(defaults, name))
        try:
            value = kind(raw)
        except ValueError:
            value = 0
        if not math.isfinite(value) or value <= 0:
            raise ConfigInvalid(
                f"{variable}={raw!r} is not a positive {'integer' if kind is int else 'number'}; "
                f"unset it for the default ({getattr(defaults, name)})"
            )
        values[name] = value
    return ServerLimits(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str
    host: str = "127.0.0.1"
    port: int = 8080
    log_level: str = "info"
    oidc: OidcSettings | None = None
    # YAML/JSON mapping identity-provider group -> users, re-read when it changes (T1).
    directory_file: Path | None = None
    # Where jobs reach this API (artifact URLs of local grants); default http://host:port.
    public_url: str | None = None
    # Signs local grants; several API replicas must share it. None: <home>/grant.key.
    grant_key: str | None = field(default=None, repr=False)
    # TLS served by uvicorn itself; None: plain HTTP (or TLS ended at a reverse proxy).
    tls: TlsFiles | None = None
    limits: ServerLimits = ServerLimits()
    # all: API and controller in one process; api: HTTP only; controller: scheduling only.
    role: str = "all"
    # The controller lease (PostgreSQL): renewed every lease_renew_s, lost after lease_s.
    lease_renew_s: float = 1.0
    lease_s: float = 6.0
    # Where Prometheus metrics are served (host, port), apart from the API; None: not served.
    metrics_address: tuple[str, int] | None = None
    # Processes that serve the API on the one listening socket (server.workers): this one and
    # api_workers - 1 API-only children; a role without the API has none.
    api_workers: int = 1

    @property
    def api_url(self) -> str:
        scheme = "https" if self.tls else "http"
        return (self.public_url or f"{scheme}://{self.host}:{self.port}").rstrip("/")

    @property
    def state_dir(self) -> Path:
        """Where backends keep per-attempt state (work dirs, logs, handles)."""
        return self.home / "runs"


@dataclass(frozen=True)
class TlsFiles:
    """The server's certificate chain and private key (PEM), handed to uvicorn."""

    certfile: Path
    keyfile: Path


def load_tls(env: Mapping[str, str], overrides: Mapping[str, object]) -> TlsFiles | None:
    """``GPUPOOL_SSL_CERTFILE`` and ``GPUPOOL_SSL_KEYFILE`` (``--ssl-certfile``,
    ``--ssl-keyfile``): both or neither, and both readable files."""
    names = {"certfile": "GPUPOOL_SSL_CERTFILE", "keyfile": "GPUPOOL_SSL_KEYFILE"}
    given = {
        key: str(overrides.get(f"ssl_{key}") or env.get(variable, "")).strip()
        for key, variable in names.items()
    }
    if not any(given.values()):
        return None
    for key, variable in names.items():
        if not given[key]:
            raise ConfigInvalid(
                f"{variable} (--ssl-{key}) is not set: TLS needs both the certificate and "
                "its private key; set both, or neither for plain HTTP"
            )
        if not Path(given[key]).is_file():
            raise ConfigInvalid(f"{variable} (--ssl-{key}): no file at {given[key]}")
    return TlsFiles(Path(given["certfile"]).absolute(), Path(given["keyfile"]).absolute())


def webhook_secret(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The signing secret of a webhook: the environment variable its ``secret_env`` names
    (read when a message is sent, so a rotated secret applies without a restart)."""
    return (os.environ if environ is None else environ).get(name)


def sqlite_url(home: Path) -> str:
    return f"sqlite:///{home / 'gpupool.db'}"


def load_role(env: Mapping[str, str], overrides: Mapping[str, object]) -> str:
    role = str(overrides.get("role") or env.get("GPUPOOL_ROLE") or "all").strip().lower()
    if role not in ROLES:
        raise ConfigInvalid(f"server role {role!r} is not one of {', '.join(ROLES)} (--role)")
    return role


def load_lease(env: Mapping[str, str]) -> tuple[float, float]:
    """``GPUPOOL_LEASE_RENEW_S`` and ``GPUPOOL_LEASE_S``: a lease must outlast a few renewals,
    or one slow renewal would hand it over."""
    values = []
    for variable, default in (("GPUPOOL_LEASE_RENEW_S", 1.0), ("GPUPOOL_LEASE_S", 6.0)):
        raw = env.get(variable, "").strip()
        try:
            value = float(raw) if raw else default
        except ValueError:
            value = 0.0
        if not math.isfinite(value) or value <= 0:
            raise ConfigInvalid(f"{variable}={raw!r} is not a positive number of seconds")
        values.append(value)
    renew_s, lease_s = values
    if lease_s < 3 * renew_s:
        raise ConfigInvalid(
            f"GPUPOOL_LEASE_S ({lease_s}) must be at least 3 x GPUPOOL_LEASE_RENEW_S ({renew_s}): "
            "raise it or renew more often"
        )
    return renew_s, lease_s


MAX_API_WORKERS = 64


def load_api_workers(env: Mapping[str, str], overrides: Mapping[str, object], role: str) -> int:
    """``GPUPOOL_API_WORKERS`` (``--api-workers``): how many processes serve the API, from 1
    (the default) to :data:`MAX_API_WORKERS`; a controller-only process serves none."""
    raw = str(overrides.get("api_workers") or env.get("GPUPOOL_API_WORKERS") or "1").strip()
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_API_WORKERS:
        raise ConfigInvalid(
            f"GPUPOOL_API_WORKERS={raw!r} (--api-workers) is not a number of processes from 1 "
            f"to {MAX_API_WORKERS}; about one per core is a good start"
        )
    if role == "controller" and int(raw) > 1:
        raise ConfigInvalid(
            "--api-workers (GPUPOOL_API_WORKERS) needs a role that serves the API (all or "
            "api): a controller-only process serves none"
        )
    return int(raw)


def load_metrics_address(
    env: Mapping[str, str], overrides: Mapping[str, object]
) -> tuple[str, int] | None:
    """``GPUPOOL_METRICS_ADDRESS`` (``--metrics-address``): ``HOST:PORT`` (``[::1]:PORT`` for
    IPv6), or a bare port on 127.0.0.1. Unset: no metrics listener."""
    raw = str(overrides.get("metrics_address") or env.get("GPUPOOL_METRICS_ADDRESS") or "")
    raw = raw.strip()
    if not raw:
        return None
    host, sep, port = raw.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", raw
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigInvalid(
            f"GPUPOOL_METRICS_ADDRESS={raw!r} (--metrics-address) is not HOST:PORT with a port "
            "from 1 to 65535; e.g. 127.0.0.1:9464, [::1]:9464 or 0.0.0.0:9464"
        )
    return host, int(port)


def load_settings(environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Settings from ``GPUPOOL_HOME``, ``GPUPOOL_DATABASE_URL``, ``GPUPOOL_HOST``,
    ``GPUPOOL_PORT``, ``GPUPOOL_LOG_LEVEL``, ``GPUPOOL_PUBLIC_URL`` and
    ``GPUPOOL_GRANT_KEY``; keyword overrides (CLI flags) win. TLS: :func:`load_tls`.

    Roles and the controller lease: ``GPUPOOL_ROLE`` (``--role``), ``GPUPOOL_LEASE_RENEW_S``
    and ``GPUPOOL_LEASE_S``. API processes: :func:`load_api_workers`. Metrics:
    :func:`load_metrics_address`.

    Identity: ``GPUPOOL_DIRECTORY_FILE`` and the ``GPUPOOL_OIDC_*`` of :class:`OidcSettings`.
    Limits: the variables of :data:`LIMIT_VARIABLES` (:class:`ServerLimits`)."""
    env = os.environ if environ is None else environ
    directory = env.get("GPUPOOL_DIRECTORY_FILE", "").strip()
    home = Path(str(overrides.get("home") or env.get("GPUPOOL_HOME") or ".gpupool")).absolute()
    database_url = str(
        overrides.get("database_url") or env.get("GPUPOOL_DATABASE_URL") or sqlite_url(home)
    )
    renew_s, lease_s = load_lease(env)
    role = load_role(env, overrides)
    return Settings(
        home=home,
        database_url=database_url,
        host=str(overrides.get("host") or env.get("GPUPOOL_HOST") or "127.0.0.1"),
        port=int(str(overrides.get("port") or env.get("GPUPOOL_PORT") or 8080)),
        log_level=str(overrides.get("log_level") or env.get("GPUPOOL_LOG_LEVEL") or "info"),
        oidc=load_oidc(env),
        directory_file=Path(directory).absolute() if directory else None,
        public_url=env.get("GPUPOOL_PUBLIC_URL") or None,
        grant_key=env.get("GPUPOOL_GRANT_KEY") or None,
        tls=load_tls(env, overrides),
        limits=load_limits(env),
        role=role,
        lease_renew_s=renew_s,
        lease_s=lease_s,
        metrics_address=load_metrics_address(env, overrides),
        api_workers=load_api_workers(env, overrides, role),
    )
