"""The grant value types and the scope of one attempt's grant (docs/architecture.md §8).

A grant gives one attempt of a job:

* read on each declared input (the path itself and, for a directory, what lies below it);
* write on one fresh prefix per declared output, ``<output>/attempt-<n>`` (see
  :func:`gpupool.data.paths.attempt_prefix`);
* nothing else, until ``expires_at`` = mint time + the job's ``max_runtime_s`` (or the
  configured default) + a margin.

Invariants: :class:`GrantScope` holds no secret and may be shown (``GET /v1/jobs/{id}``
shows it); :class:`Grant` holds the signed URLs, which are secrets: its ``repr`` leaves them
out, it is never persisted, and it reaches the job only as environment variables
(:meth:`Grant.env`, variable names in :data:`ENV_NAMES`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from gpupool.data.paths import attempt_prefix

GrantKind = Literal["local", "azure", "s3"]

ENV_KIND = "GPUPOOL_GRANT_KIND"
ENV_EXPIRES = "GPUPOOL_GRANT_EXPIRES_AT"
ENV_INPUT_URLS = "GPUPOOL_INPUT_URLS"
ENV_OUTPUT_URLS = "GPUPOOL_OUTPUT_URLS"
ENV_OUTPUT_URL = "GPUPOOL_OUTPUT_URL"
ENV_NAMES = (ENV_KIND, ENV_EXPIRES, ENV_INPUT_URLS, ENV_OUTPUT_URLS, ENV_OUTPUT_URL)


class GrantError(Exception):
    """A grant could not be minted (storage unreachable, credentials missing). The message
    names the cause and never holds a secret."""


@dataclass(frozen=True, slots=True)
class GrantScope:
    """What an attempt may do, and until when. No secret."""

    team: str
    user: str  # whose job: local grants are checked with this user's permissions on disk
    job_id: str
    attempt: int
    reads: tuple[str, ...]  # declared inputs, canonical, relative to the team root
    writes: tuple[str, ...]  # one prefix per declared output
    expires_at: datetime

    def summary(self, kind: str) -> dict[str, Any]:
        """The public view: kind, scope and expiry."""
        return {
            "kind": kind,
            "reads": list(self.reads),
            "writes": list(self.writes),
            "expires_at": self.expires_at.isoformat(),
        }


def scope_for(
    *,
    team: str,
    user: str,
    job_id: str,
    attempt: int,
    inputs: Sequence[str],
    outputs: Sequence[str],
    now: datetime,
    max_runtime_s: int | None,
    default_runtime_s: int,
    margin_s: int,
) -> GrantScope:
    """The scope of attempt ``attempt``'s grant (see the module docstring)."""
    runtime = max_runtime_s if max_runtime_s is not None else default_runtime_s
    return GrantScope(
        team=team,
        user=user,
        job_id=job_id,
        attempt=attempt,
        reads=tuple(inputs),
        writes=tuple(attempt_prefix(o, attempt) for o in outputs),
        expires_at=now + timedelta(seconds=runtime + margin_s),
    )


@dataclass(frozen=True, slots=True)
class OutputTarget:
    """How to write one output.

    ``PUT``: upload each file with ``PUT`` to ``url`` with ``/<relative name>`` appended to
    its path (query string kept). ``POST`` (S3): a multipart form to ``url`` with ``fields``,
    and ``key`` = ``fields["key"]`` with ``${filename}`` replaced by the relative name.
    """

    url: str
    method: Literal["PUT", "POST"] = "PUT"
    fields: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "method": self.method,
            "fields": dict(self.fields),
            "headers": dict(self.headers),
        }


@dataclass(frozen=True)
class Grant:
    """A minted grant: the scope and, per declared path, the secret URL for it."""

    kind: GrantKind
    scope: GrantScope
    inputs: Mapping[str, str] = field(repr=False)  # declared input -> URL (GET)
    outputs: Mapping[str, OutputTarget] = field(repr=False)  # declared output -> target

    def env(self) -> dict[str, str]:
        """The job's variables. ``GPUPOOL_INPUT_URLS``: JSON ``{input: url}``;
        ``GPUPOOL_OUTPUT_URLS``: JSON ``{output: {url, method, fields, headers}}``;
        ``GPUPOOL_OUTPUT_URL``: the first output's URL (for jobs with one output)."""
        env = {
            ENV_KIND: self.kind,
            ENV_EXPIRES: self.scope.expires_at.isoformat(),
            ENV_INPUT_URLS: json.dumps(dict(self.inputs), sort_keys=True),
            ENV_OUTPUT_URLS: json.dumps(
                {k: v.as_json() for k, v in self.outputs.items()}, sort_keys=True
            ),
        }
        if self.outputs:
            env[ENV_OUTPUT_URL] = next(iter(self.outputs.values())).url
        return env

    def summary(self) -> dict[str, Any]:
        return self.scope.summary(self.kind)
