"""Exit codes of the ``gpupool`` CLI — a documented, stable contract for scripts.

    code  meaning
    ----  ----------------------------------------------------------------
    0     success
    1     unexpected error (a bug, or a server error: HTTP 5xx)
    2     usage error: bad flags or arguments (reported by Typer/Click)
    3     not found: the job, team or route does not exist
    4     not allowed: unauthenticated (missing/bad token) or forbidden
    5     rejected: invalid request, invalid config, conflict, or too many requests
    6     server unreachable: nothing answered at the URL
    7     server unavailable for now (HTTP 503, e.g. its database is restarting): retry later

The mapping goes by exception class, so a new error code the server adds later falls into the
class's bucket (or 1) rather than crashing the CLI.
"""

from __future__ import annotations

from gpupool.client.errors import (
    Conflict,
    ConnectionFailed,
    Forbidden,
    GpupoolError,
    InvalidRequest,
    NotFound,
    TooManyRequests,
    Unauthenticated,
    Unavailable,
)

OK = 0
UNEXPECTED = 1
USAGE = 2
NOT_FOUND = 3
NOT_ALLOWED = 4
REJECTED = 5
UNREACHABLE = 6
UNAVAILABLE = 7

# First match wins; subclasses (ConfigInvalid < InvalidRequest) inherit their parent's code.
_EXIT_CODES: tuple[tuple[type[GpupoolError], int], ...] = (
    (ConnectionFailed, UNREACHABLE),
    (Unavailable, UNAVAILABLE),
    (NotFound, NOT_FOUND),
    (Unauthenticated, NOT_ALLOWED),
    (Forbidden, NOT_ALLOWED),
    (InvalidRequest, REJECTED),
    (Conflict, REJECTED),
    (TooManyRequests, REJECTED),
)

HELP = """\
Exit codes: 0 ok; 1 unexpected error; 2 usage error; 3 not found;
4 unauthenticated or forbidden; 5 invalid request, conflict or too many requests;
6 server unreachable; 7 server unavailable for now (retry later)."""


def exit_code_for(error: GpupoolError) -> int:
    for cls, code in _EXIT_CODES:
        if isinstance(error, cls):
            return code
    return UNEXPECTED
