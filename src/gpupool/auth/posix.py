"""Where a user's POSIX identity (uid, gid, extra groups) comes from (T3).

A job runs as its user's uid. That identity is looked up, first match wins, in:

1. ``users.<name>`` of the cluster configuration (the operator's word);
2. the directory file's ``users:`` section (``auth.directory``), refreshed with the file;
3. the identity provider's claims, when the server is told which claims carry them
   (``GPUPOOL_OIDC_UID_CLAIM``, ``GPUPOOL_OIDC_GID_CLAIM``, ``GPUPOOL_OIDC_GROUPS_GID_CLAIM``).

So a user whom the identity provider puts in a team's group can submit without a YAML edit.
Identities from 2 and 3 are remembered in the store at submit (``state.identities``), so
the controller, which never sees the user's token, runs the job as that uid, and the data
service checks signed URLs as it.

Identities below :data:`MIN_ID` (root and the system accounts) are refused from the
directory and from claims: a provider whose users may edit their own attributes must never
make anyone root. Such an account, if it must run jobs, is listed under ``users:``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MIN_ID = 1000  # the first uid/gid a directory or a token may hand out (Debian's FIRST_UID)
MAX_ID = 2**31 - 1


@dataclass(frozen=True, slots=True)
class PosixId:
    uid: int
    gid: int
    groups: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {"uid": self.uid, "gid": self.gid, "groups": list(self.groups)}


class PosixIdError(ValueError):
    """An identity that cannot be used; the message names the field."""


def _number(value: object, field: str) -> int:
    if isinstance(value, bool):
        raise PosixIdError(f"{field}: expected a number, got {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    else:
        raise PosixIdError(f"{field}: expected a number, got {type(value).__name__}")
    if not MIN_ID <= number <= MAX_ID:
        raise PosixIdError(
            f"{field}: {number} is outside {MIN_ID}-{MAX_ID} (system ids are only accepted "
            "under users: in the configuration)"
        )
    return number


def parse(uid: object, gid: object, groups: object = None, *, where: str = "") -> PosixId:
    """An identity from untyped values (YAML, JSON claims): numbers or digit strings."""
    prefix = f"{where}." if where else ""
    extra: list[int] = []
    if groups is not None:
        items = groups.split() if isinstance(groups, str) else groups
        if not isinstance(items, Sequence):
            raise PosixIdError(f"{prefix}groups: expected a list of numbers")
        extra = [_number(g, f"{prefix}groups") for g in items]
    return PosixId(
        _number(uid, f"{prefix}uid"),
        _number(gid, f"{prefix}gid"),
        tuple(dict.fromkeys(extra)),
    )


@dataclass(frozen=True, slots=True)
class ClaimNames:
    """Which token claims carry the identity (None: the server does not read it)."""

    uid: str | None = None
    gid: str | None = None
    groups: str | None = None

    @property
    def enabled(self) -> bool:
        return self.uid is not None and self.gid is not None


def from_claims(claims: Mapping[str, object], names: ClaimNames) -> PosixId | None:
    """The identity a token's claims carry, or None when they carry none. A token that
    carries a bad one is not refused (the user may still read); it gives no identity."""
    if not names.enabled:
        return None
    assert names.uid is not None and names.gid is not None
    uid, gid = claims.get(names.uid), claims.get(names.gid)
    if uid is None or gid is None:
        return None
    groups = claims.get(names.groups) if names.groups else None
    try:
        return parse(uid, gid, groups, where="token")
    except PosixIdError:
        return None
