"""Job arrays: the index specification of ``gpupool submit --array`` (pure, no I/O).

A specification is a comma-separated list of items, each an index (``7``), a range
(``0-999``, both ends included) or a range with a step (``0-9:2`` → 0, 2, 4, 6, 8), as Slurm's
``--array`` spells them (its ``%`` throttle is not supported). Invariants of
:func:`parse_array`: the indices it returns are distinct, sorted, each ``0 <= i <= MAX_INDEX``,
and there are at most ``max_tasks`` of them; anything else is an ``InvalidRequest`` naming the
``array`` field and the fix.

A task's job id is ``<array id>_<index>`` (:func:`task_id`), so the Slurm spelling of one task
is also its job id.
"""

from __future__ import annotations

import re

from gpupool.core.errors import InvalidRequest

FIELD = "array"
# Indices stay small, readable numbers (Slurm's default MaxArraySize is 1001; ours is a
# server limit on the number of tasks, not on the index).
MAX_INDEX = 999_999
MAX_SPEC_CHARS = 1000
ARRAY_ID = re.compile(r"^a-[0-9a-f]{12}$")
_ITEM = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")


def _invalid(message: str) -> InvalidRequest:
    return InvalidRequest(f"invalid array: {message}", [{"field": FIELD, "message": message}])


def parse_array(spec: str, max_tasks: int) -> tuple[int, ...]:
    """The task indices of ``spec`` (e.g. ``0-999``, ``0-9:2``, ``1,3,5``), sorted."""
    text = spec.strip()
    if not text:
        raise _invalid("empty; give indices such as 0-99, 0-9:2 or 1,3,5")
    if len(text) > MAX_SPEC_CHARS:
        raise _invalid(f"longer than {MAX_SPEC_CHARS} characters; use ranges such as 0-999")
    indices: set[int] = set()
    for raw in text.split(","):
        item = raw.strip()
        match = _ITEM.match(item)
        if match is None:
            raise _invalid(f"{item!r} is not an index, a range (0-99) or a stepped range (0-99:2)")
        first = int(match[1])
        last = int(match[2]) if match[2] is not None else first
        step = int(match[3]) if match[3] is not None else 1
        if last > MAX_INDEX:
            raise _invalid(f"{item!r}: indices go up to {MAX_INDEX}")
        if last < first:
            raise _invalid(f"{item!r}: a range goes from low to high, e.g. {last}-{first}")
        if step < 1:
            raise _invalid(f"{item!r}: the step must be at least 1")
        # Count before building: a huge range must fail fast, not allocate first.
        if (last - first) // step + 1 > max_tasks:
            raise _too_many(max_tasks)
        indices.update(range(first, last + 1, step))
        if len(indices) > max_tasks:
            raise _too_many(max_tasks)
    return tuple(sorted(indices))


def _too_many(max_tasks: int) -> InvalidRequest:
    return _invalid(
        f"more than {max_tasks} tasks, the server's limit (GPUPOOL_MAX_ARRAY_TASKS); "
        "split it into several arrays"
    )


def task_id(array_id: str, index: int) -> str:
    return f"{array_id}_{index}"


def is_array_id(value: str) -> bool:
    """Whether ``value`` names a whole array (``a-<12 hex>``), not one of its tasks."""
    return ARRAY_ID.match(value) is not None
