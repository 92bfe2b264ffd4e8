"""Everything a running server holds, built once at start (composition root)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from gpupool.auth.directory import Directory
from gpupool.auth.identity import Authenticator
from gpupool.auth.oidc import OidcValidator
from gpupool.backends.base import AdapterContext
from gpupool.backends.registry import PoolBackend, Registry
from gpupool.config import Settings
from gpupool.controller.clock import Clock, SystemClock
from gpupool.controller.execution import ExecutionService
from gpupool.controller.loop import Controller
from gpupool.data.grants.issuer import GrantIssuer
from gpupool.data.grants.local import Signer, signing_key
from gpupool.server.services.artifacts import ArtifactService
from gpupool.server.services.audit import AuditService
from gpupool.server.services.jobs import JobService
from gpupool.server.services.teams import TeamService
from gpupool.spec.models import ClusterConfig
from gpupool.state.db import make_engine, session_factory, upgrade

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: Settings
    config: ClusterConfig
    engine: Engine
    sessions: sessionmaker[Session]
    clock: Clock
    controller: Controller
    execution: ExecutionService
    jobs: JobService = field(init=False)
    teams: TeamService = field(init=False)
    audit: AuditService = field(init=False)
    auth: Authenticator = field(init=False)
    artifacts: ArtifactService = field(init=False)
    signer: Signer | None = None  # signs local grants; None: from the settings' key

    def __post_init__(self) -> None:
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
        )
        self.jobs = JobService(
            self.sessions,
            self.current_config,
            self.clock,
            self.controller.wake,
            limits=self.settings.limits,
        )
        self.teams = TeamService(self.sessions, self.current_config, self.controller.backoff.health)

    def current_config(self) -> ClusterConfig:
        return self.config

    def close(self) -> None:
        self.controller.stop()
        self.execution.close()
        self.engine.dispose()


def pool_bindings(config: ClusterConfig, state_dir: Path) -> dict[str, PoolBackend]:
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
            ),
        )
        for pool in config.pools
    }


def build_runtime(settings: Settings, config: ClusterConfig, clock: Clock | None = None) -> Runtime:
    """Migrate the store and wire the services; the controller is not started yet."""
    engine = make_engine(settings.database_url)
    upgrade(engine)
    sessions = session_factory(engine)
    clock = clock or SystemClock()
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    runtime: Runtime
    registry = Registry(lambda name: pool_bindings(runtime.config, settings.state_dir).get(name))
    execution = ExecutionService(registry)
    signer = Signer(signing_key(settings.home, settings.grant_key))
    grants = GrantIssuer(settings.home, signer, settings.api_url, clock.now)
    controller = Controller(sessions, lambda: runtime.config, execution, clock, grants)
    runtime = Runtime(
        settings, config, engine, sessions, clock, controller, execution, signer=signer
    )
    return runtime
