"""Container images of jobs: what an image reference may look like, and which a pool allows.

A reference follows the OCI distribution grammar: ``[registry[:port]/]path[:tag][@digest]``,
e.g. ``ghcr.io/acme/train:1.4``, ``localhost/tools:dev`` or ``nvcr.io/nvidia/pytorch@sha256:...``.
Invariants this module owns:

* A valid reference has no whitespace, no shell metacharacter and no leading ``-``: it reaches
  command lines (podman, srun, apptainer) as one argument and can never be read as a flag.
* A pool's ``allowed_images`` are shell-style globs (``fnmatch``, case-sensitive) matched
  against the whole reference as the user wrote it; an empty list allows nothing. A glob never
  matches across a digest it does not mention: ``ghcr.io/acme/*`` allows
  ``ghcr.io/acme/train@sha256:...`` because ``*`` spans any characters, so operators who
  want tags only write ``ghcr.io/acme/*:*``.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from fnmatch import fnmatchcase

MAX_REFERENCE_LEN = 512
# Components as in the OCI distribution spec's reference grammar (lower-case path components,
# an optional registry host with port, a tag of word characters, a digest algorithm:hex).
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = rf"(?:{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?/)"
_PATH = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*"
_TAG = r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})"
_DIGEST = r"(?:@[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,})"
_REFERENCE = re.compile(rf"{_HOST}?{_PATH}{_TAG}?{_DIGEST}?\Z")


class ImageProblem(ValueError):
    """An image reference that cannot be used; the message says what to write instead."""


def check_reference(reference: str) -> str:
    """``reference`` unchanged when it is a valid OCI image reference; :class:`ImageProblem`
    naming what is wrong otherwise."""
    if not reference:
        raise ImageProblem("empty image reference; write e.g. ghcr.io/acme/train:1.4")
    if len(reference) > MAX_REFERENCE_LEN:
        raise ImageProblem(f"longer than {MAX_REFERENCE_LEN} characters")
    if reference.startswith("-"):
        raise ImageProblem("starts with '-'; write the image's name, e.g. ghcr.io/acme/train:1.4")
    if not _REFERENCE.match(reference):
        raise ImageProblem(
            f"{reference!r} is not an OCI image reference: write [registry/]name[:tag][@digest] "
            "with a lower-case name, e.g. ghcr.io/acme/train:1.4 or localhost/tools:dev"
        )
    return reference


def is_allowed(reference: str, patterns: Iterable[str]) -> bool:
    """True when one of the pool's ``allowed_images`` globs matches ``reference``."""
    return any(fnmatchcase(reference, pattern) for pattern in patterns)
