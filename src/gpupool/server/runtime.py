"""Everything a running server holds, built once at start (composition root).

It also sets the modes of ``GPUPOOL_HOME`` (see :func:`private_home`): a job runs under its
user's uid on this machine and must not read the store, the grant key or other jobs' state.
"""

from __future__ import annotations

import logging
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpupool.auth.directory import Directory
from gpupool.auth.identity import Authenticator
from gpupool.auth.oidc import OidcValidator
from gpupool.auth.posix import PosixId
from gpupool.backends.base import AdapterContext, ContainerPolicy
from gpupool.backends.registry import PoolBackend, Registry
from gpupool.config import Settings
from gpupool.controller.clock import Clock, SystemClock
from gpupool.controller.execution import ExecutionService
from gpupool.controller.leader import Leadership, LeaseElector, LeaseTiming, SoleLeader
from gpupool.controller.loop import Controller
from gpupool.core.errors import ConfigInvalid
from gpupool.data.grants.issuer import GrantIssuer
from gpupool.data.grants.local import KEY_FILE, Signer, signing_key
from gpupool.data.roots import LocalRoot, team_root
from gpupool.data.storage import ensure_team_layouts
from gpupool.server.live_config import LiveConfig
from gpupool.server.services.artifacts import ArtifactService
from gpupool.server.services.audit import AuditService
from gpupool.server.services.budgets import BudgetService
from gpupool.server.services.config import ConfigService
from gpupool.server.services.dashboard import DashboardService
from gpupool.server.services.forecasts import ForecastService
from gpupool.server.services.jobs import JobService
from gpupool.server.services.teams import TeamService
from gpupool.server.services.tokens import TokenService
from gpupool.server.services.usage import UsageService
from gpupool.server.webhooks import WebhookWorker
from gpupool.spec.models import ClusterConfig, Pool
from gpupool.state import identities
from gpupool.state.db import Engine, SessionFactory, Sessions, make_engine, session_factory
from gpupool.state.schema import ensure_schema
from gpupool.state.secrets import GRANT_KEY, shared_secret

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    config: ClusterConfig
    engine: Engine
    sessions: SessionFactory
    clock: Clock
    controller: Controller
    execution: ExecutionService
    jobs: JobService = field(init=False)
    teams: TeamService = field(init=False)
    audit: AuditService = field(init=False)
    auth: Authenticator = field(init=False)
    artifacts: ArtifactService = field(init=False)
    usage: UsageService = field(init=False)
    tokens: TokenService = field(init=False)
    signer: Signer | None = None  # signs local grants; None: from the settings' key
    # Keeps ``config`` current from the store's versions (None: a fixed configuration).
    live: LiveConfig | None = None
    config_service: ConfigService = field(init=False)
    # Sends budget alerts from the outbox; started with the controller (server.webhooks).
    webhooks: WebhookWorker = field(init=False)
    budgets: BudgetService = field(init=False)
    dashboard: DashboardService = field(init=False)  # what the /ui pages show (server.ui)
    # Told of a stored submit, cancel or configuration change; None: this process's
    # controller (an API worker passes its pipe to the parent's, server.workers).
    wake: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        wake = self.wake or self.controller.wake
        if self.signer is None:
            self.signer = Signer(signing_key(self.settings.home, self.settings.grant_key))
        self.audit = AuditService(self.sessions, self.current_config)
        oidc = OidcValidator(self.settings.oidc) if self.settings.oidc else None
        directory = (
            Directory(self.settings.directory_file) if self.settings.directory_file else None
        )
        self.auth = Authenticator(self.sessions, self.clock, self.current_config, oidc, directory)
        self.artifacts = ArtifactService(
            self.signer,
            self.current_config,
            self.settings.home,
            self.clock,
            groups_of=directory.groups_of if directory else None,
            unverified_groups=oidc is not None,  # a token's group claim cannot be re-read
            stored_identity=self._stored_identity,
        )
        self.jobs = JobService(
            self.sessions,
            self.current_config,
            self.clock,
            wake,
            limits=self.settings.limits,
            pool_health=self.controller.backoff.health,
            forecasts=ForecastService(
                self.sessions, self.current_config, lambda: self.controller.last_cycle
            ),
        )
        self.tokens = TokenService(self.sessions, self.clock)
        self.teams = TeamService(
            self.sessions,
            self.current_config,
            self.controller.backoff.health,
            self.clock.now,
            self.controller.autoscaler.status.get,
        )
        self.usage = UsageService(self.sessions, self.current_config, self.clock)
        if self.live is None:
            self.live = LiveConfig(self.sessions, self.config)
        self.config_service = ConfigService(
            self.sessions, self.live, self.clock, self._prepare_storage, wake
        )
        self.budgets = BudgetService(
            self.sessions, self.current_config, self.clock, self.config_service
        )
        self.dashboard = DashboardService(
            self.current_config,
            self.clock,
            self.jobs,
            self.teams,
            self.budgets,
            self.usage,
            self.controller.backoff.health,
        )
        self.webhooks = WebhookWorker(
            self.sessions, self.current_config, self.clock, self.controller.leader.is_leader
        )

    def current_config(self) -> ClusterConfig:
        """The configuration in force; picks up a version another process applied."""
        if self.live is not None:
            self.config = self.live.get()
        return self.config

    def _stored_identity(self, user: str) -> PosixId | None:
        with self.sessions() as session:
            return identities.lookup(session, user)

    def _prepare_storage(self, config: ClusterConfig) -> None:
        prepare_storage(config, self.settings)

    def close(self) -> None:
        self.controller.stop()
        self.webhooks.stop()
        self.execution.close()
        self.engine.dispose()


def pool_bindings(
    config: ClusterConfig, state_dir: Path, home: Path | None = None
) -> dict[str, PoolBackend]:
    """Each pool's backend and adapter context; ``home`` (GPUPOOL_HOME) locates the teams'
    default storage, which pools that run images mount into containers."""
    return {
        pool.name: PoolBackend(
            backend=pool.backend,
            context=AdapterContext(
                pool=pool.name,
                gpu_type=pool.gpu_type,
                options=dict(pool.options),
                state_dir=state_dir,
                nodes=pool.nodes,
                gpus_per_node=pool.node.gpus,
                container=container_policy(config, pool, home),
            ),
        )
        for pool in config.pools
    }


def container_policy(config: ClusterConfig, pool: Pool, home: Path | None) -> ContainerPolicy:
    """The pool's container settings, with each team's local storage root (none on a pool that
    runs no images, mounts no storage, or where the root is a blob container or bucket)."""
    roots: dict[str, str] = {}
    if pool.container_runtime is not None and pool.containers.mount_storage and home is not None:
        for team in config.teams:
            try:
                root = team_root(config.storage, team, home)
            except ValueError:
                continue  # reported by the configuration checks
            if isinstance(root, LocalRoot):
                roots[team] = str(root.path.absolute())
    return ContainerPolicy(
        runtime=pool.container_runtime,
        allowed_images=tuple(pool.allowed_images),
        network=pool.containers.network,
        mount_storage=pool.containers.mount_storage,
        pull_secrets=dict(pool.containers.pull_secrets),
        team_roots=roots,
    )


def prepare_storage(config: ClusterConfig, settings: Settings) -> None:
    """Create or repair every team's local storage tree (owners, modes: data.storage);
    run at start and whenever a new configuration is applied."""
    try:
        ensure_team_layouts(config, settings.home)
    except (OSError, ValueError) as exc:
        raise ConfigInvalid(
            f"cannot prepare team storage: {exc}; check storage.root and the teams' gids"
        ) from exc


# Directories jobs must traverse (to their work dirs and team storage) but never list.
TRAVERSE_ONLY = 0o711
PRIVATE_FILES = (KEY_FILE,)  # besides the SQLite files, which state.db keeps private


def private_home(home: Path, state_dir: Path) -> None:
    """``GPUPOOL_HOME`` and the backends' state dir: at most 0711 (group and others may pass
    through, not list or write); the grant key 0600. Made so when missing; an existing
    directory only loses permissions (a home an operator made 0700 stays 0700)."""
    for directory in (home, state_dir):
        directory.mkdir(mode=TRAVERSE_ONLY, parents=True, exist_ok=True)
        _narrow(directory, 0o066)
    for name in PRIVATE_FILES:
        _narrow(home / name, 0o077)


def _narrow(path: Path, remove: int) -> None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return
    mode = info.st_mode & 0o7777
    if not mode & remove:
        return
    if info.st_uid != os.geteuid() and os.geteuid() != 0:
        log.warning("%s is mode %o and not ours to change: remove %o from it", path, mode, remove)
        return
    path.chmod(mode & ~remove)


def build_runtime(
    settings: Settings,
    config: ClusterConfig,
    clock: Clock | None = None,
    wake: Callable[[], None] | None = None,
) -> Runtime:
    """Check the store's schema (a fresh store is created; an older one is refused, see
    ``state.schema``) and wire the services; the controller is not started yet. ``wake``:
    what a stored submit or cancel tells (default: this process's controller)."""
    private_home(settings.home, settings.state_dir)
    engine = make_engine(settings.database_url)
    ensure_schema(engine)
    sessions = session_factory(engine)
    clock = clock or SystemClock()
    runtime: Runtime
    retired: dict[str, PoolBackend] = {}  # removed pools: still reachable to end their jobs
    registry = Registry(
        lambda name: (
            pool_bindings(runtime.current_config(), settings.state_dir, settings.home).get(name)
            or retired.get(name)
        )
    )
    execution = ExecutionService(registry)
    signer = Signer(grant_signing_key(settings, sessions, clock))
    grants = GrantIssuer(settings.home, signer, settings.api_url, clock.now)
    leader: Leadership = SoleLeader()
    if is_postgres(settings):  # several controllers may run: elect one
        timing = LeaseTiming(settings.lease_renew_s, settings.lease_s)
        leader = LeaseElector(sessions, clock, timing)
    controller = Controller(
        sessions, lambda: runtime.current_config(), execution, clock, grants, leader
    )
    runtime = Runtime(
        settings, config, engine, sessions, clock, controller, execution, signer=signer, wake=wake
    )
    live = runtime.live
    assert live is not None  # made by Runtime when not given

    def rebind(old: ClusterConfig, new: ClusterConfig) -> None:
        before = pool_bindings(old, settings.state_dir, settings.home)
        after = pool_bindings(new, settings.state_dir, settings.home)
        for name, binding in before.items():
            if name not in after:
                retired[name] = binding  # its running jobs are still polled and cancelled
            elif after[name] != binding:
                registry.forget(name)  # the next call builds the adapter from the new options
        for name in after:
            retired.pop(name, None)

    live.prepare.append(lambda _old, new: runtime._prepare_storage(new))
    live.listeners.append(rebind)
    live.listeners.append(lambda _old, _new: controller.wake())
    live.refresh()  # the newest stored version, if the store has one
    runtime.config = live.config
    return runtime


def is_postgres(settings: Settings) -> bool:
    return settings.database_url.startswith("postgresql")


def grant_signing_key(settings: Settings, sessions: Sessions, clock: Clock) -> bytes:
    """``GPUPOOL_GRANT_KEY`` when set. Otherwise, on PostgreSQL, the key stored in the database,
    so every API replica signs and checks with the same one (made by the first process to
    start, from an existing ``grant.key`` file so URLs already handed out stay valid); on
    SQLite, where one process runs, the ``grant.key`` file."""
    if settings.grant_key is not None or not is_postgres(settings):
        return signing_key(settings.home, settings.grant_key)
    path = settings.home / KEY_FILE
    candidate = path.read_text(encoding="ascii").strip() if path.exists() else None
    with sessions.begin() as session:
        stored = shared_secret(session, GRANT_KEY, candidate or secrets.token_hex(32), clock.now())
    return bytes.fromhex(stored)
