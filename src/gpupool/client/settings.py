"""Where the SDK finds its server and token: the one place the client side reads the environment.

Explicit arguments win over ``GPUPOOL_URL`` / ``GPUPOOL_TOKEN``, which win over the default URL.
The CLI passes its ``--url`` / ``--token`` flags straight through (``None`` when not given), so
flags, environment and default resolve identically for the SDK and the CLI. Without a token from
either, the credential ``gpupool login`` stored for that exact URL is used (renewed first when it
has expired: :mod:`gpupool.client.signin`); it lives in ``$XDG_CONFIG_HOME/gpupool/``, by default
``~/.config/gpupool/``.

The token is kept out of ``repr`` so that a settings object that ends up in a log line, a
traceback or an exception never leaks it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

ENV_URL = "GPUPOOL_URL"
ENV_TOKEN = "GPUPOOL_TOKEN"
DEFAULT_URL = "http://127.0.0.1:8080"
CREDENTIALS_FILE = "credentials.json"


@dataclass(frozen=True)
class ClientSettings:
    url: str
    token: str | None = field(default=None, repr=False)


def resolve(
    url: str | None = None,
    token: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ClientSettings:
    """Fill what the caller did not give from the environment, then from defaults."""
    env = os.environ if environ is None else environ
    resolved_url = resolve_url(url, env)
    resolved_token = token or environment_token(env)
    if resolved_token is None:
        resolved_token = _signed_in_token(resolved_url, env)
    return ClientSettings(url=resolved_url, token=resolved_token)


def environment_token(environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    # An empty GPUPOOL_TOKEN means "no token", not "send an empty bearer".
    return env.get(ENV_TOKEN) or None


def resolve_url(url: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return (url or env.get(ENV_URL) or DEFAULT_URL).rstrip("/")


def credentials_file(environ: Mapping[str, str] | None = None) -> Path | None:
    """Where ``gpupool login`` keeps its credentials; ``None`` when the environment names no
    config directory (neither ``XDG_CONFIG_HOME`` nor ``HOME``)."""
    env = os.environ if environ is None else environ
    # The XDG base directory rule: a relative XDG_CONFIG_HOME is invalid and ignored.
    config_home = env.get("XDG_CONFIG_HOME", "")
    if config_home and os.path.isabs(config_home):
        return Path(config_home) / "gpupool" / CREDENTIALS_FILE
    home = env.get("HOME", "")
    if home:
        return Path(home) / ".config" / "gpupool" / CREDENTIALS_FILE
    return None


def _signed_in_token(url: str, env: Mapping[str, str]) -> str | None:
    path = credentials_file(env)
    if path is None:
        return None
    # Imported here: signin needs the error classes, and errors imports this module.
    from gpupool.client.signin import stored_token

    return stored_token(path, url)
