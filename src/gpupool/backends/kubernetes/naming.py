"""Names and labels of the Kubernetes objects of an attempt.

Invariants:

* :func:`job_name` is a pure function of the key (and the pool's prefix): the same key always
  names the same Job, which is what makes ``submit`` idempotent (a second create gets 409).
* The name is a DNS-1123 label of at most :data:`MAX_NAME` characters, and distinct keys give
  distinct names: the readable part is cut and lower-cased, so a hash of the whole key is
  always appended. :data:`MAX_NAME` leaves room under 63 for the ``-<index>`` that an Indexed
  Job appends to make each pod's hostname.
* Label values hold only what fits a label (pool, team, name); the key itself, which may not,
  is an annotation.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 52
HASH_CHARS = 10
MANAGED_BY = ("app.kubernetes.io/managed-by", "gpupool")
POOL_LABEL = "gpupool.io/pool"
TEAM_LABEL = "gpupool.io/team"
JOB_LABEL = "gpupool.io/job"  # the Job's name, on the Job and on its pods
KEY_ANNOTATION = "gpupool.io/key"
POOL_ANNOTATION = "gpupool.io/pool"
USER_ANNOTATION = "gpupool.io/user"
MAX_RUNTIME_ANNOTATION = "gpupool.io/max-runtime-s"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"  # set on pods by Kubernetes
CONTAINER = "main"

_NOT_DNS = re.compile(r"[^a-z0-9-]+")


def job_name(key: str, prefix: str = "gpupool-") -> str:
    """The Job of attempt ``key``: ``<prefix><readable key>-<hash>``, a DNS-1123 label."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:HASH_CHARS]
    room = MAX_NAME - len(prefix) - len(digest) - 1
    readable = _NOT_DNS.sub("-", key.lower()).strip("-")[:room].strip("-")
    parts = [p for p in (readable, digest) if p]
    name = f"{prefix}{'-'.join(parts)}"
    return name if name[0].isalnum() else f"g{name}"[:MAX_NAME]


def pool_selector(pool: str) -> str:
    """The label selector of every Job (and pod) of ``pool``."""
    return f"{MANAGED_BY[0]}={MANAGED_BY[1]},{POOL_LABEL}={pool}"


def job_selector(name: str) -> str:
    return f"{JOB_LABEL}={name}"
