"""Translate Slurm's failures into backend errors (docs/code-style.md §8).

A Slurm client reports everything the same way: a non-zero exit and a line on stderr. The
table :data:`ERROR_TABLE` classifies those lines by what the caller should do:

* the controller cannot be reached, or is busy: ``BackendUnavailable`` (retry later);
* the job's request cannot be met (no such gres, more than a node has): ``BackendRejected``;
* gpupool's pool configuration names something Slurm does not have (partition, account,
  QOS), or the Slurm client is not installed: ``BackendMisconfigured`` (no retry would help).

A failure no line matches is ``BackendUnavailable``: every command the adapter runs is safe to
repeat (``submit`` looks up its key before submitting), so retrying is the cautious choice.
Timeouts and parse errors are ``BackendUnavailable`` too.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from gpupool.backends.errors import (
    BackendError,
    BackendMisconfigured,
    BackendRejected,
    BackendUnavailable,
)
from gpupool.backends.slurm.commands import SlurmClientMissing, SlurmCommandError

# (substring of stderr, lower case) -> error class; the first match wins.
ERROR_TABLE: tuple[tuple[str, type[BackendError]], ...] = (
    ("unable to contact slurm controller", BackendUnavailable),
    ("socket timed out", BackendUnavailable),
    ("connection refused", BackendUnavailable),
    ("temporarily unable to accept job", BackendUnavailable),
    ("resource temporarily unavailable", BackendUnavailable),
    ("zero bytes were transmitted", BackendUnavailable),
    ("invalid partition", BackendMisconfigured),
    ("invalid account", BackendMisconfigured),
    ("invalid qos", BackendMisconfigured),
    ("unable to process configuration file", BackendMisconfigured),
    ("requested node configuration is not available", BackendRejected),
    ("invalid generic resource", BackendRejected),
    ("memory specification can not be satisfied", BackendRejected),
    ("node count specification invalid", BackendRejected),
    ("more processors requested than permitted", BackendRejected),
    ("job violates accounting/qos policy", BackendRejected),
    ("invalid --time specification", BackendRejected),
    ("requested time limit is invalid", BackendRejected),
)


def classify(stderr: str) -> type[BackendError]:
    text = stderr.lower()
    for needle, error in ERROR_TABLE:
        if needle in text:
            return error
    return BackendUnavailable


@contextmanager
def map_slurm_errors(action: str) -> Iterator[None]:
    """Re-raise what goes wrong while doing ``action`` as exactly one backend error."""
    try:
        yield
    except BackendError:
        raise
    except SlurmCommandError as exc:
        raise classify(exc.stderr)(f"slurm cannot {action}: {exc}") from exc
    except SlurmClientMissing as exc:
        raise BackendMisconfigured(
            f"slurm cannot {action}: {exc}; install the Slurm client commands "
            "(Debian: slurm-client) where gpupool runs"
        ) from exc
    except PermissionError as exc:
        raise BackendMisconfigured(f"slurm cannot {action}: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise BackendUnavailable(f"slurm cannot {action} now: {exc}") from exc
    except (OSError, ValueError) as exc:
        # ValueError: output we cannot parse. Reading it as "no such job" could start a second
        # run, so the caller retries instead.
        raise BackendUnavailable(f"slurm cannot {action} now: {exc}") from exc
