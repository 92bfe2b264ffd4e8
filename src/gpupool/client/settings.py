"""Where the SDK finds its server and token: the one place the client side reads the environment.

Explicit arguments win over ``GPUPOOL_URL`` / ``GPUPOOL_TOKEN``, which win over the default URL.
The CLI passes its ``--url`` / ``--token`` flags straight through (``None`` when not given), so
flags, environment and default resolve identically for the SDK and the CLI.

The token is kept out of ``repr`` so that a settings object that ends up in a log line, a
traceback or an exception never leaks it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

ENV_URL = "GPUPOOL_URL"
ENV_TOKEN = "GPUPOOL_TOKEN"
DEFAULT_URL = "http://127.0.0.1:8080"


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
    resolved_url = url or env.get(ENV_URL) or DEFAULT_URL
    # An empty GPUPOOL_TOKEN means "no token", not "send an empty bearer".
    resolved_token = token or env.get(ENV_TOKEN) or None
    return ClientSettings(url=resolved_url.rstrip("/"), token=resolved_token)
