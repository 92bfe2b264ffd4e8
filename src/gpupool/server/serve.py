"""Start the control plane: store, configuration, first-start tokens, controller, HTTP.

``settings.role`` picks what this process runs: ``all`` (API and controller, the default),
``api`` (HTTP only: any number of replicas on one PostgreSQL store) or ``controller``
(scheduling only, behind the lease of ``controller.leader``; HTTP serves just the health
routes). On SQLite one server runs, in role ``all``, and holds a lock next to the store.
``settings.api_workers`` > 1: the API is served by that many processes (``server.workers``).
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import IO

import uvicorn
from fastapi import FastAPI
from starlette.types import ASGIApp

from gpupool.auth.audit import OK, AuditEntry, operator_actor, record
from gpupool.auth.tokens import IssuedToken, create_token, has_tokens
from gpupool.config import Settings
from gpupool.controller.clock import SystemClock
from gpupool.controller.leader import lock_sqlite_store
from gpupool.core.errors import ConfigInvalid, Conflict
from gpupool.data.redaction import install_logging, uvicorn_log_config
from gpupool.server.app import create_app
from gpupool.server.http_guard import guarded_protocol, raise_open_files_limit
from gpupool.server.metrics.exporter import Metrics
from gpupool.server.routes import health
from gpupool.server.runtime import Runtime, build_runtime, is_postgres, prepare_storage
from gpupool.server.workers import ApiWorkers
from gpupool.spec.load import load_config, parse_config
from gpupool.spec.models import ClusterConfig
from gpupool.state import config_store
from gpupool.state.db import Sessions, make_engine, session_factory
from gpupool.state.schema import ensure_schema

log = logging.getLogger("gpupool.server")


def resolve_config(settings: Settings, config_path: Path | None) -> ClusterConfig:
    """The configuration to run: the newest version in the store. ``config_path`` seeds
    version 1 when the store has none; once versions exist the stored one wins (changes go
    through ``gpupool config apply``, so a restarted replica cannot undo them), and a file
    that differs from it is reported in the log. A file with problems raises
    ``ConfigInvalid`` before the store is even opened: invalid config never reaches it."""
    config = text = None
    if config_path is not None:
        config = load_config(config_path)
        text = config_path.read_text(encoding="utf-8")
    engine = make_engine(settings.database_url)
    try:
        ensure_schema(engine)  # an older store is refused: gpupool db upgrade
        sessions = session_factory(engine)
        if config is not None and text is not None and _seed(sessions, text, str(config_path)):
            return config
        with sessions() as session:
            latest = config_store.current(session)
        if latest is None:
            raise ConfigInvalid(
                "no configuration stored yet: start with --config FILE (e.g. examples/demo.yaml)"
            )
        if text is not None and latest.digest != config_store.digest(text):
            log.warning(
                "%s differs from the stored configuration (version %d, applied by %s); "
                "running version %d. To change it: gpupool config apply %s",
                config_path,
                latest.version,
                latest.applied_by,
                latest.version,
                config_path,
            )
        return parse_config(latest.text, f"configuration version {latest.version}")
    finally:
        engine.dispose()


def _seed(sessions: Sessions, text: str, source: str) -> bool:
    """Store ``text`` as version 1 if the store has no version yet; True if it did. Two
    processes starting at once on a new store: one seeds, the other runs what it stored."""
    try:
        with sessions.begin() as session:
            if config_store.current_version(session) > 0:
                return False
            now = SystemClock().now()
            actor = operator_actor()
            config_store.append(
                session,
                base=0,
                text=text,
                at=now,
                applied_by=actor,
                source=source,
                summary="first version, from server --config",
            )
            record(
                session, AuditEntry(now, actor, "config.apply", OK, None, f"version 1: {source}")
            )
    except Conflict:  # another process seeded it first
        return False
    return True


def first_start_tokens(runtime: Runtime) -> list[IssuedToken]:
    """One token per configured user, only when the store has no token at all."""
    with runtime.sessions.begin() as session:
        if has_tokens(session):
            return []
        now = runtime.clock.now()
        return [
            create_token(session, user, now, description="first start")
            for user in sorted(runtime.config.users)
        ]


def hold_store(settings: Settings) -> IO[str] | None:
    """On SQLite, the lock that keeps a second server process off the store (held until the
    returned file is closed). Roles other than ``all`` need PostgreSQL."""
    if is_postgres(settings):
        return None
    if settings.role != "all":
        raise ConfigInvalid(
            f"--role {settings.role} needs PostgreSQL (GPUPOOL_DATABASE_URL): on SQLite one "
            "server runs both the API and the controller (--role all; --api-workers N "
            "serves its API from N processes)"
        )
    url = settings.database_url
    path = url.split("///", 1)[-1].split("?", 1)[0] if "///" in url else ""
    if not path or path == ":memory:":
        return None
    Path(path).parent.mkdir(mode=0o711, parents=True, exist_ok=True)
    return lock_sqlite_store(Path(f"{path}.lock"))


def health_app(runtime: Runtime) -> FastAPI:
    """What a controller-only process serves: the health routes (its role, the leader)."""
    app = FastAPI(title="gpupool controller", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.runtime = runtime
    app.include_router(health.router)
    return app


class PortTaken(ConfigInvalid):
    """The address the server should listen on is in use (another server, another program)."""


def bind_listener(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound before anything starts: a taken port is refused
    before the store is opened or a scheduler runs. uvicorn listens on it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be bound ({exc.strerror})"
        raise PortTaken(
            f"{host}:{port} {why}: is another gpupool server running? Stop it, or choose "
            "another port with --port (GPUPOOL_PORT) or address with --host (GPUPOOL_HOST)"
        ) from None
    return sock


def serve(
    settings: Settings,
    config_path: Path | None,
    echo: Callable[[str], None] = print,
) -> None:
    store_lock = hold_store(settings)  # released when serving ends, however it ends
    metrics_socket = None
    try:
        with bind_listener(settings.host, settings.port) as listener:
            metrics_socket = bind_metrics(settings)
            _serve(settings, config_path, echo, listener, metrics_socket)
    finally:
        if metrics_socket is not None:
            metrics_socket.close()
        if store_lock is not None:
            store_lock.close()


def bind_metrics(settings: Settings) -> socket.socket | None:
    """The metrics listener (``GPUPOOL_METRICS_ADDRESS``), bound before anything starts, as
    the API's is; None when metrics are not served."""
    if settings.metrics_address is None:
        return None
    host, port = settings.metrics_address
    try:
        return bind_listener(host, port)
    except PortTaken:
        raise PortTaken(
            f"the metrics address {host}:{port} cannot be bound (in use, or not an address of "
            "this machine): choose another with --metrics-address (GPUPOOL_METRICS_ADDRESS)"
        ) from None


def _serve(
    settings: Settings,
    config_path: Path | None,
    echo: Callable[[str], None],
    listener: socket.socket,
    metrics_listener: socket.socket | None = None,
) -> None:
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)  # one line per migration is noise
    install_logging()  # before anything can log a token, URL or signature
    config = resolve_config(settings, config_path)
    prepare_storage(config, settings)
    runtime = build_runtime(settings, config)
    scheme = "https" if settings.tls else "http"
    url = f"{scheme}://{settings.host}:{settings.port}"
    role = settings.role
    tokens = first_start_tokens(runtime) if role != "controller" else []
    counts = f"{len(config.pools)} pool(s), {len(config.teams)} team(s)"
    echo(f"gpupool {counts}; state in {settings.home}; role {role}")
    if role == "controller":
        echo(f"controller only (no API); health on {url}/healthz")
    else:
        echo(f"listening on {url}  (dashboard: {url}/ui, API docs: {url}/docs)")
    if tokens:
        echo("first start: one API token per user (shown once; keep them safe):")
        for token in tokens:
            echo(f"  {token.user:<12} {token.secret}")
        echo(f"try:  export GPUPOOL_URL={url} GPUPOOL_TOKEN=<a token above>; gpupool jobs")
    if any(p.backend == "local" for p in config.pools) and os.geteuid() != 0:
        log.warning(
            "not running as root: local jobs run as this server's user (uid %d), "
            "not as their users' POSIX identities",
            os.geteuid(),
        )
    soft, _ = raise_open_files_limit()  # room for connections (slow clients are cut below)
    log.debug("open files limit: %d", soft)
    app: ASGIApp = health_app(runtime) if role == "controller" else create_app(runtime)
    metrics = None
    if metrics_listener is not None:
        metrics = Metrics(
            role,
            runtime.controller.leader if role != "api" else None,
            lambda pool: runtime.controller.backoff.health(pool).available,
            lambda: runtime.controller.budgets.states,
        )
        runtime.controller.observe(metrics.recorder)
        app = metrics.wrap(app)
        metrics.serve(metrics_listener)
        host, port = settings.metrics_address or ("", 0)
        echo(f"metrics on http://{f'[{host}]' if ':' in host else host}:{port}/metrics")
    if role != "api":  # an API replica leaves scheduling to the controllers
        runtime.controller.start()
        runtime.webhooks.start()
    workers = None
    if settings.api_workers > 1 and role != "controller":
        # An API replica's children wake no controller of this process: the one leading
        # reads their writes from the store.
        wake = runtime.controller.wake if role == "all" else lambda: None
        workers = ApiWorkers(settings, listener, wake)
        workers.start(settings.api_workers - 1)
        echo(f"API served by {settings.api_workers} processes (workers {workers.pids})")
    try:
        _run_http(app, settings, listener)
    finally:
        if workers is not None:
            workers.stop()
        if metrics is not None:
            metrics.close()
        runtime.close()


def serve_worker(settings: Settings, listener: socket.socket, wake: Callable[[], None]) -> None:
    """An API worker's process (``server.workers``): the API of the stored configuration on
    its parent's socket, telling ``wake`` of what it stores. No controller, no metrics
    listener, no first-start tokens: its parent has them."""
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)
    install_logging()
    raise_open_files_limit()
    runtime = build_runtime(settings, resolve_config(settings, None), wake=wake)
    try:
        _run_http(create_app(runtime), settings, listener)
    finally:
        runtime.close()


def _run_http(app: ASGIApp, settings: Settings, listener: socket.socket) -> None:
    limits = settings.limits
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            # Header and body read deadlines: a request that never ends holds nothing long.
            http=guarded_protocol(limits.header_timeout_s, limits.body_timeout_s),
            log_level=settings.log_level.lower(),
            access_log=settings.log_level.lower() == "debug",
            log_config=uvicorn_log_config(),
            # TLS by uvicorn (--ssl-certfile/--ssl-keyfile); else plain HTTP or a proxy's.
            ssl_certfile=str(settings.tls.certfile) if settings.tls else None,
            ssl_keyfile=str(settings.tls.keyfile) if settings.tls else None,
        )
    )
    server.run(sockets=[listener])
    if not server.started:  # uvicorn has logged why (a TLS file it could not load, ...)
        raise SystemExit(3)
