"""Shell completion of job ids, teams and gpu types, asked of the server as the user types.

Typer installs the completion script (``gpupool --install-completion``); when the shell asks
for candidates, these functions call the API with the user's ``GPUPOOL_URL`` and
``GPUPOOL_TOKEN``. A completion must never print an error into the user's prompt nor make it
wait: every failure gives no candidates, and each call times out after ``TIMEOUT_S``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpupool.cli import context
from gpupool.client.errors import GpupoolError
from gpupool.client.sdk import Client

TIMEOUT_S = 2.0
LIMIT = 200  # the newest jobs offered


def _ask(fetch: Callable[[Client], Iterable[str]], incomplete: str) -> list[str]:
    try:
        with context.make_client(None, None, timeout=TIMEOUT_S) as sdk:
            found = list(fetch(sdk))
    except (GpupoolError, OSError, ValueError):
        return []
    return sorted({name for name in found if name.startswith(incomplete)})


def job_ids(incomplete: str) -> list[str]:
    """Ids of the newest jobs the user can see (job arrays by their array id too)."""

    def fetch(sdk: Client) -> Iterable[str]:
        page = sdk.jobs(limit=LIMIT, group=True)
        for job in page.items:
            yield job.id
            if job.array_id:
                yield job.array_id

    return _ask(fetch, incomplete)


def teams(incomplete: str) -> list[str]:
    return _ask(lambda sdk: (team.name for team in sdk.teams()), incomplete)


def gpu_types(incomplete: str) -> list[str]:
    return _ask(lambda sdk: (pool.gpu_type for pool in sdk.pools()), incomplete)
