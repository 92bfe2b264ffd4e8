"""Team storage roots: where a team's ``shared/`` and ``home/<user>/`` live (docs/architecture.md
§8).

The configuration's ``storage.root`` is one URI for every team, ``storage.teams`` one per
team (see :class:`gpupool.spec.models.Storage`):

=============================  =============================================================
``/srv/data`` (or none)        local: ``/srv/data/<team>`` (none: ``<GPUPOOL_HOME>/storage``)
``az://<account>``             Azure Blob: the team's own container, named after the team
``s3://<bucket>[/<prefix>]``   S3: the team's prefix ``<prefix>/<team>/`` in the bucket
=============================  =============================================================

A per-team URI is that team's root as given (``az://<account>/<container>``,
``s3://<bucket>/<prefix>``, a directory). Invariant: two teams never share a root, so a
grant scoped to one team's root reaches nothing of another's. Pure: parsing only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from gpupool.data.storage import default_base
from gpupool.spec.models import Storage

_ACCOUNT = re.compile(r"[a-z0-9]{3,24}\Z")
_CONTAINER = re.compile(r"(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]\Z")
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\Z")


@dataclass(frozen=True, slots=True)
class LocalRoot:
    path: Path


@dataclass(frozen=True, slots=True)
class AzureRoot:
    account: str
    container: str


@dataclass(frozen=True, slots=True)
class S3Root:
    bucket: str
    prefix: str  # "" or "a/b/": always ends with '/' when not empty

    def key(self, path: str) -> str:
        return self.prefix + path


TeamRoot = LocalRoot | AzureRoot | S3Root


class RootProblem(ValueError):
    """A storage URI that cannot be used; the message names the fix."""


def _split(uri: str, scheme: str) -> tuple[str, str]:
    rest = uri[len(scheme) :]
    head, _, tail = rest.partition("/")
    return head, tail.strip("/")


def parse_root(uri: str, team: str | None) -> TeamRoot:
    """The root of ``team`` under the shared ``uri`` (``team`` given), or the root ``uri``
    names for one team (``team`` None)."""
    if uri.startswith("az://"):
        account, container = _split(uri, "az://")
        if not _ACCOUNT.match(account):
            raise RootProblem(
                f"invalid storage account {account!r}: 3-24 lowercase letters and digits"
            )
        if team is not None:
            if container:
                raise RootProblem(
                    "a shared root is az://<account> (each team gets a container named after "
                    "it); put az://<account>/<container> under storage.teams.<team>"
                )
            container = team
        if not _CONTAINER.match(container):
            raise RootProblem(
                f"invalid container name {container!r}: 3-63 lowercase letters, digits and "
                "single '-', e.g. az://account/team-a"
            )
        return AzureRoot(account, container)
    if uri.startswith("s3://"):
        bucket, prefix = _split(uri, "s3://")
        if not _BUCKET.match(bucket):
            raise RootProblem(f"invalid bucket name {bucket!r}: e.g. s3://my-bucket/teams")
        if team is not None:
            prefix = f"{prefix}/{team}" if prefix else team
        return S3Root(bucket, prefix + "/" if prefix else "")
    if "://" in uri:
        raise RootProblem(
            f"unknown storage scheme in {uri!r}; use a directory, az://... or s3://..."
        )
    if not uri.strip():
        raise RootProblem("empty storage root; give a directory, az://... or s3://...")
    path = Path(uri).expanduser()
    return LocalRoot(path / team if team is not None else path)


def team_root(storage: Storage, team: str, home: Path) -> TeamRoot:
    """Where ``team``'s data lives; ``home`` is GPUPOOL_HOME (for the default local root)."""
    own = storage.teams.get(team)
    if own is not None:
        return parse_root(own, None)
    if storage.root is None:
        return LocalRoot(default_base(home) / team)
    return parse_root(storage.root, team)
