"""Who is asking, and the one authorization check every route goes through (T3).

Roles per team: ``admin`` and ``member`` may read and mutate the team's jobs, ``viewer``
may only read; a team admin also reads the team's audit trail. A platform admin
(``users.<name>.platform_admin``, or a member of one of ``platform_admin_groups``) may do
everything. A platform-wide ``auditor`` (``users.<name>.auditor``) reads every team's usage and
costs (:meth:`Principal.reads_usage_of`) and nothing else beyond their own team roles; it
never adds a right to change anything. Everything else is ``Forbidden``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpupool.auth.posix import PosixId
from gpupool.core.errors import Forbidden
from gpupool.spec.models import ClusterConfig


class Action(StrEnum):
    READ = "read"
    MUTATE = "mutate"


@dataclass(frozen=True)
class Principal:
    user: str
    token_id: str
    platform_admin: bool = False
    roles: dict[str, str] = field(default_factory=dict)  # team -> role
    auditor: bool = False  # reads every team's usage and costs (C2), nothing more
    # The POSIX identity the directory file or the token gave (auth.posix); None when it
    # comes from users: in the configuration, or from nowhere.
    posix: PosixId | None = None
    posix_source: str = ""  # "directory" or "token", when ``posix`` is set

    @property
    def reads_all_usage(self) -> bool:
        return self.platform_admin or self.auditor

    def reads_usage_of(self, team: str) -> bool:
        return self.reads_all_usage or self.can(Action.READ, team)

    def can(self, action: Action, team: str) -> bool:
        if self.platform_admin:
            return True
        role = self.roles.get(team)
        if role is None:
            return False
        return action is Action.READ or role in ("admin", "member")

    def readable_teams(self, all_teams: list[str]) -> list[str]:
        return [t for t in all_teams if self.can(Action.READ, t)]


def principal_for(
    config: ClusterConfig,
    user: str,
    token_id: str,
    groups: frozenset[str] = frozenset(),
    posix: PosixId | None = None,
    posix_source: str = "",
) -> Principal:
    """Roles come from the applied configuration and the user's identity-provider groups as
    of this request, so a change to either applies at the next request (T1).

    An explicit ``members:`` entry gives its role; otherwise a team one of whose ``groups``
    the user is in makes them a ``member`` of it. Explicit entries win, so a team can make a
    group member a viewer or an admin by listing them. A member of one of
    ``platform_admin_groups`` is a platform admin.
    """
    spec = config.users.get(user)
    roles: dict[str, str] = {}
    for name, team in config.teams.items():
        if user in team.members:
            roles[name] = team.members[user]
        elif groups and not groups.isdisjoint(team.groups):
            roles[name] = "member"
    return Principal(
        user=user,
        token_id=token_id,
        platform_admin=bool(spec and spec.platform_admin)
        or not groups.isdisjoint(config.platform_admin_groups),
        roles=roles,
        auditor=bool(spec and spec.auditor),
        posix=None if spec is not None else posix,
        posix_source="" if spec is not None or posix is None else posix_source,
    )


def authorize(principal: Principal, action: Action, team: str) -> None:
    """Raise ``Forbidden`` unless ``principal`` may do ``action`` on ``team``'s resources."""
    if not principal.can(action, team):
        verb = "change" if action is Action.MUTATE else "read"
        raise Forbidden(f"user {principal.user!r} may not {verb} resources of team {team!r}")
