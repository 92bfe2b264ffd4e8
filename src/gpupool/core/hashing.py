"""Stable hashing for deterministic tie-breaks.

Python's built-in ``hash()`` of a ``str`` is salted per process (PYTHONHASHSEED), so any
decision that used it would differ between two runs of the same snapshot. Everything here is
derived from BLAKE2b instead, which gives the same value on every machine, process and release.

Invariants:

* :func:`stable_hash64` is a pure function of the UTF-8 bytes of its argument.
* :func:`rendezvous_order` is a pure function of ``key`` and the *set* of candidates: the order
  in which candidates are passed does not matter.
* Removing a candidate never changes the relative order of the others, so a key whose first
  choice survives keeps it (the "minimal disruption" property of rendezvous hashing).
* With weights, the probability that a candidate comes first for a random key is proportional
  to its weight (logarithmic method of Schindelhauer and Schomaker, "Weighted distributed hash
  tables", 2005).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

_UNIT_BITS = 53  # a double holds 53 bits exactly, so the unit interval value below is exact


def stable_hash64(text: str) -> int:
    """An unsigned 64-bit hash of ``text`` that is stable across processes and machines."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rendezvous_score(key: str, candidate: str, weight: float) -> float:
    """The weighted rendezvous score of ``candidate`` for ``key``; the highest score wins.

    ``score = -weight / ln(u)`` where ``u`` is the pair's hash mapped into the open interval
    (0, 1). For uniform ``u`` the winner among candidates is distributed in proportion to the
    weights. ``u`` keeps the top 53 bits and is offset by half a step so it is never 0 or 1
    (``ln`` of either would divide by zero or infinity).
    """
    if not weight > 0:
        raise ValueError(f"rendezvous weight must be positive, got {weight!r} for {candidate!r}")
    # The NUL separator keeps ("ab", "c") and ("a", "bc") apart.
    h = stable_hash64(f"{candidate}\x00{key}") >> (64 - _UNIT_BITS)
    unit = (h + 0.5) / float(1 << _UNIT_BITS)
    return -weight / math.log(unit)


def rendezvous_order(key: str, candidates: Sequence[tuple[str, float]]) -> list[str]:
    """Candidate names ordered by weighted rendezvous score for ``key``, best first.

    ``candidates`` are ``(name, weight)`` pairs with unique names and positive weights. Equal
    scores (practically impossible) fall back to the name so the order is always total.
    """
    names = [name for name, _ in candidates]
    if len(set(names)) != len(names):
        raise ValueError(f"rendezvous candidates must have unique names, got {sorted(names)}")
    scored = [(-rendezvous_score(key, name, weight), name) for name, weight in candidates]
    scored.sort()
    return [name for _, name in scored]
