"""Process settings: the one place environment variables are read (DESIGN §3).

Everything else receives a :class:`Settings` value. The cluster configuration (teams,
pools, quotas) is a different thing: it is a YAML file, see ``gpupool.spec``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:8080"


@dataclass(frozen=True)
class Settings:
    home: Path
    database_url: str
    host: str = "127.0.0.1"
    port: int = 8080
    log_level: str = "info"

    @property
    def state_dir(self) -> Path:
        """Where backends keep per-attempt state (work dirs, logs, handles)."""
        return self.home / "runs"


def sqlite_url(home: Path) -> str:
    return f"sqlite:///{home / 'gpupool.db'}"


def load_settings(environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Settings from ``GPUPOOL_HOME``, ``GPUPOOL_DATABASE_URL``, ``GPUPOOL_HOST``,
    ``GPUPOOL_PORT`` and ``GPUPOOL_LOG_LEVEL``; keyword overrides (CLI flags) win."""
    env = os.environ if environ is None else environ
    home = Path(str(overrides.get("home") or env.get("GPUPOOL_HOME") or ".gpupool")).absolute()
    database_url = str(
        overrides.get("database_url") or env.get("GPUPOOL_DATABASE_URL") or sqlite_url(home)
    )
    return Settings(
        home=home,
        database_url=database_url,
        host=str(overrides.get("host") or env.get("GPUPOOL_HOST") or "127.0.0.1"),
        port=int(str(overrides.get("port") or env.get("GPUPOOL_PORT") or 8080)),
        log_level=str(overrides.get("log_level") or env.get("GPUPOOL_LOG_LEVEL") or "info"),
    )
