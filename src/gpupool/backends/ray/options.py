"""The ``options:`` of a Ray pool, validated once when the adapter is built.

Unknown keys are an error (a typo must not silently send jobs to the default address). The
bearer token is held in a :class:`Secret` whose ``repr`` and ``str`` never show it, so it
cannot leak through a log line, an error message or a dataclass ``repr``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from gpupool.backends.errors import BackendMisconfigured

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class Secret:
    """A string that does not print itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class RayOptions:
    address: str = DEFAULT_ADDRESS  # the Ray dashboard (Jobs API), http(s)://host:port
    resource_prefix: str = "gpu_"  # a job asks for the custom resource <prefix><gpu_type>
    token: Secret | None = None  # bearer token, for clusters with token authentication
    token_env: str | None = None  # or: the name of an environment variable holding it
    working_dir_root: str | None = None  # per-attempt dirs; default <state_dir>/ray/<pool>
    request_timeout_s: float = 30.0  # per HTTP request to the Jobs API
    stop_grace_s: int | None = None  # SIGTERM -> SIGKILL on stop; None: the head's setting
    submission_id_prefix: str = ""  # namespaces ids when installations share one Ray cluster
    ray_temp_dir: str = "/tmp/ray"  # the nodes' Ray temp dir: mounted into image containers

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> RayOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise BackendMisconfigured(
                f"unknown ray pool options: {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        values: dict[str, Any] = dict(raw)
        try:
            for name in (
                "address",
                "resource_prefix",
                "token_env",
                "working_dir_root",
                "submission_id_prefix",
                "ray_temp_dir",
            ):
                if values.get(name) is not None and not isinstance(values[name], str):
                    raise TypeError(f"{name} must be a string")
            if "request_timeout_s" in values:
                values["request_timeout_s"] = float(values["request_timeout_s"])
                if values["request_timeout_s"] <= 0:
                    raise ValueError("request_timeout_s must be positive")
            if values.get("stop_grace_s") is not None:
                values["stop_grace_s"] = int(values["stop_grace_s"])
                if values["stop_grace_s"] < 0:
                    raise ValueError("stop_grace_s must not be negative")
            token = values.get("token")
            if token is not None:
                if isinstance(token, Secret):
                    pass
                elif isinstance(token, str) and token:
                    values["token"] = Secret(token)
                else:
                    raise TypeError("token must be a non-empty string")
        except (TypeError, ValueError) as exc:
            raise BackendMisconfigured(f"invalid ray pool options: {exc}") from exc
        options = cls(**values)
        options._check()
        return options

    def _check(self) -> None:
        if not self.address.startswith(("http://", "https://")):
            raise BackendMisconfigured(
                f"ray pool option address must be the dashboard's http(s):// URL, "
                f"got {self.address!r}"
            )
        if self.token is not None and self.token_env is not None:
            raise BackendMisconfigured("ray pool options token and token_env exclude each other")
        if self.token_env is not None and not _ENV_NAME.match(self.token_env):
            raise BackendMisconfigured(
                f"ray pool option token_env must name an environment variable, "
                f"got {self.token_env!r}"
            )
        if not re.fullmatch(r"[A-Za-z0-9_]*", self.resource_prefix):
            raise BackendMisconfigured(
                f"ray pool option resource_prefix must be letters, digits or _, "
                f"got {self.resource_prefix!r}"
            )

        if not re.fullmatch(r"[A-Za-z0-9._-]*", self.submission_id_prefix):
            raise BackendMisconfigured(
                f"ray pool option submission_id_prefix must be letters, digits, '.', '_' or "
                f"'-', got {self.submission_id_prefix!r}"
            )

    def bearer(self, environ: Mapping[str, str]) -> Secret | None:
        """The token to send, read from ``environ`` when ``token_env`` names it."""
        if self.token_env is None:
            return self.token
        value = environ.get(self.token_env, "")
        if not value:
            raise BackendMisconfigured(
                f"ray pool option token_env names {self.token_env}, which is not set or empty"
            )
        return Secret(value)
