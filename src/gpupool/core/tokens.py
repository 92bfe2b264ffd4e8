"""The shape of a gpupool API token, shared by the server and the SDK: ``gpt_<id>_<secret>``.

The id names the token (in lists, the audit trail and revocations); the secret is shown
once, when the token is made, and only its SHA-256 is stored.
"""

from __future__ import annotations

PREFIX = "gpt"


def token_id_of(given: str) -> str:
    """The id in what a user has at hand: the bare id, ``gpt_<id>`` or the whole token
    ``gpt_<id>_<secret>`` as it was printed (the secret is not needed to name it)."""
    parts = given.strip().split("_", 2)
    if parts[0] == PREFIX and len(parts) >= 2:
        return parts[1]
    return given.strip()
