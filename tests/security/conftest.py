"""Fixtures of the attack tests: real Unix users and the server as root (``support.hostile``)."""

from support.hostile import cluster, unix_world  # noqa: F401  (fixtures)
