"""Where the webhook finds identities and team namespaces: the cluster configuration and the
directory file, in the order of ``auth.posix`` (``users:`` first, then the directory's
``users:``). Identities a token's claims carry are not available here: the API server does not
pass the token on, only the user's name.
"""

from __future__ import annotations

from collections.abc import Callable

from gpupool.auth.directory import Directory
from gpupool.auth.posix import PosixId
from gpupool.k8s.admission import WebhookPolicy
from gpupool.k8s.names import team_namespace
from gpupool.spec.models import ClusterConfig


class ConfiguredIdentities:
    """An :class:`~gpupool.k8s.admission.IdentityLookup` over the current configuration."""

    def __init__(
        self, config: Callable[[], ClusterConfig], directory: Directory | None = None
    ) -> None:
        self._config = config
        self._directory = directory

    def identity_of(self, user: str) -> PosixId | None:
        spec = self._config().users.get(user)
        if spec is not None:
            return PosixId(spec.uid, spec.gid, tuple(dict.fromkeys(spec.groups)))
        return self._directory.identity_of(user) if self._directory else None


def policy_for(
    config: ClusterConfig,
    username_prefix: str = "",
    delegates: frozenset[str] = frozenset(),
    groups_policy: str | None = "Strict",
) -> WebhookPolicy:
    return WebhookPolicy(
        team_gids={team_namespace(name): team.gid for name, team in config.teams.items()},
        username_prefix=username_prefix,
        delegates=delegates,
        groups_policy=groups_policy,
    )
