"""The generated autoscale formula, evaluated: a small interpreter of the part of Batch's
formula language the formula uses (assignments, ``?:``, ``max``/``min``/``ceil`` over numbers
and sample vectors, ``$PendingTasks.GetSample`` and ``GetSamplePercent``) runs it on named
situations and checks the targets Batch would set. The exact text is pinned by the export's
golden file; this checks what it means."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import pytest

from gpupool.backends.azure_batch.pooldef import Scale, autoscale_formula

_TERNARY = re.compile(r"^(?P<cond>.+?) \? (?P<yes>.+?) : (?P<no>.+)$")


def _flat(args: tuple[Any, ...]) -> list[float]:
    out: list[float] = []
    for arg in args:
        out.extend(arg if isinstance(arg, list) else [arg])
    return out


@dataclass(frozen=True)
class Situation:
    pending_now: int  # $PendingTasks' latest sample (active + running tasks)
    window: tuple[int, ...]  # its samples during the idle window
    window_percent: float = 100.0  # how much of the window has samples
    dedicated: int = 0  # $CurrentDedicatedNodes
    low_priority: int = 0  # $CurrentLowPriorityNodes


def evaluate(formula: str, now: Situation) -> dict[str, Any]:
    """Run ``formula`` as Batch would once, in situation ``now``; the variables it set."""
    names: dict[str, Any] = {
        "CurrentDedicatedNodes": now.dedicated,
        "CurrentLowPriorityNodes": now.low_priority,
    }

    def sample(interval: float) -> list[float]:
        return [now.pending_now] if interval == 1 else list(now.window)

    scope = {
        "v": names,
        "sample": sample,
        "percent": lambda interval: now.window_percent,
        "max": lambda *a: max(_flat(a)),
        "min": lambda *a: min(_flat(a)),
        "ceil": math.ceil,
    }
    for statement in formula.split(";"):
        if not statement.strip():
            continue
        target, _, expression = statement.strip().partition(" = ")
        python = (
            expression.replace("$PendingTasks.GetSamplePercent", "percent")
            .replace("$PendingTasks.GetSample", "sample")
            .replace("TimeInterval_Second", "1")
            .replace("taskcompletion", "'taskcompletion'")
        )
        python = re.sub(r"\$(\w+)", r'v["\1"]', python)
        if found := _TERNARY.match(python):
            python = f"({found['yes']}) if ({found['cond']}) else ({found['no']})"
        names[target.lstrip("$")] = eval(python, scope)  # the formula made by the code under test
    return names


@dataclass(frozen=True)
class Case:
    scale: Scale
    now: Situation
    want_dedicated: int
    want_low_priority: int = 0


H100 = Scale(min_nodes=0, max_nodes=4, warm_nodes=1, idle_timeout_s=1800)
T4_SPOT = Scale(min_nodes=0, max_nodes=8, idle_timeout_s=600, slots_per_node=2, spot=True)


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            Case(H100, Situation(3, (1, 2, 3), dedicated=1), 3), id="pending tasks set the target"
        ),
        pytest.param(Case(H100, Situation(10, (10,), dedicated=4), 4), id="never above max_nodes"),
        pytest.param(
            Case(H100, Situation(0, (0, 2, 0), dedicated=3), 3),
            id="idle for less than idle_timeout_s: keeps its nodes",
        ),
        pytest.param(
            Case(H100, Situation(0, (0, 0, 0), dedicated=3), 1),
            id="idle for idle_timeout_s: down to the warm floor",
        ),
        pytest.param(
            Case(H100, Situation(0, (0,), window_percent=10, dedicated=0), 1),
            id="a new pool starts at its warm floor",
        ),
        pytest.param(
            Case(
                Scale(min_nodes=0, max_nodes=4, idle_timeout_s=60),
                Situation(0, (0, 0), dedicated=2),
                0,
            ),
            id="no warm floor: scales to zero",
        ),
        pytest.param(
            Case(Scale(min_nodes=2, max_nodes=4, warm_nodes=1), Situation(1, (1,)), 2),
            id="min_nodes is a floor even when busy",
        ),
        pytest.param(
            Case(Scale(min_nodes=0, max_nodes=2, warm_nodes=5), Situation(0, (0,)), 2),
            id="a warm floor above max_nodes is capped",
        ),
        pytest.param(
            Case(T4_SPOT, Situation(5, (5,), low_priority=0), 0, 3),
            id="spot: low-priority nodes, tasks packed by slots",
        ),
        pytest.param(
            Case(T4_SPOT, Situation(0, (0, 0), low_priority=3), 0, 0),
            id="spot: idle, scales to zero",
        ),
    ],
)
def test_the_formula_sets_the_targets(case: Case) -> None:
    got = evaluate(autoscale_formula(case.scale), case.now)

    assert (got["TargetDedicatedNodes"], got["TargetLowPriorityNodes"]) == (
        case.want_dedicated,
        case.want_low_priority,
    )
    assert got["NodeDeallocationOption"] == "taskcompletion"
