"""Edits of a configuration's YAML text that keep the rest of the text as written.

``gpupool budget set`` stores a new configuration version like ``gpupool config apply`` does,
so its text must be the stored text with one change, comments and layout intact: the text is
changed only where the team's ``budgets:`` value is (or, when the team has none, one line is
added after the team's last line). The edited text is parsed again and must give exactly the
configuration wanted; anything else (a layout this edit cannot handle, such as a team written
with YAML anchors) is refused with a message that says to use ``gpupool config apply``.
"""

from __future__ import annotations

import math
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpupool.core.errors import ConfigInvalid
from gpupool.spec.load import parse_config
from gpupool.spec.models import Budget, ClusterConfig

_BY_HAND = "edit the file and run `gpupool config apply` instead"


def set_budget(text: str, source: str, team: str, budget: Budget) -> tuple[str, ClusterConfig]:
    """``text`` with ``budget`` added to ``team``'s budgets (replacing the one of its name),
    and the configuration it parses to."""
    old = parse_config(text, source)
    if team not in old.teams:
        raise ConfigInvalid(f"no team named {team!r} in the configuration")
    budgets = [b for b in old.teams[team].budgets if b.name != budget.name]
    replaced = len(budgets) != len(old.teams[team].budgets)
    if replaced:  # keep its place in the list
        budgets = [budget if b.name == budget.name else b for b in old.teams[team].budgets]
    else:
        budgets.append(budget)
    flow = _flow([_plain(b) for b in budgets])
    edited = _edit(text, team, flow)
    new = parse_config(edited, source)
    wanted_team = old.teams[team].model_copy(update={"budgets": budgets})
    wanted = old.model_copy(update={"teams": {**old.teams, team: wanted_team}})
    if new != wanted:
        raise ConfigInvalid(
            f"cannot change team {team!r}'s budgets in this text safely; {_BY_HAND}"
        )
    return edited, new


def _plain(budget: Budget) -> dict[str, Any]:
    """The budget as it would be written by hand: its name, then what differs from defaults."""
    data = budget.model_dump(exclude_defaults=True)  # dates stay dates: YAML writes them bare
    return {"name": budget.name, **{k: v for k, v in data.items() if k != "name"}}


def _flow(value: Any) -> str:
    dumped = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=math.inf)
    return dumped.strip()


def _value(node: Node, key: str) -> tuple[ScalarNode, Node] | None:
    if not isinstance(node, MappingNode):
        return None
    for k, v in node.value:
        if isinstance(k, ScalarNode) and k.value == key:
            return k, v
    return None


def _leaf_end(node: Node) -> int:
    """Where a node's own text ends: block collections' end marks run on over the blank and
    comment lines after them, so follow the last entry down to a scalar or flow node."""
    while isinstance(node, MappingNode | SequenceNode) and not node.flow_style and node.value:
        last = node.value[-1]
        node = last[1] if isinstance(node, MappingNode) else last
    return int(node.end_mark.index)


def _edit(text: str, team: str, flow: str) -> str:
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    teams = _value(root, "teams") if root is not None else None
    found = _value(teams[1], team) if teams is not None else None
    if found is None:
        raise ConfigInvalid(f"cannot find team {team!r} in the configuration text; {_BY_HAND}")
    _, node = found
    existing = _value(node, "budgets")
    if existing is not None:  # replace the value after "budgets:"
        budgets_key, value = existing
        colon = text.index(":", budgets_key.end_mark.index) + 1
        return f"{text[:colon]} {flow}{text[_leaf_end(value) :]}"
    if isinstance(node, MappingNode) and node.flow_style:  # team-x: {cohort: c}
        close = node.end_mark.index - 1
        joiner = ", " if node.value else ""
        return f"{text[:close]}{joiner}budgets: {flow}{text[close:]}"
    if isinstance(node, MappingNode) and node.value:  # a block mapping: a line after its last
        indent = " " * node.value[0][0].start_mark.column
        end = text.find("\n", _leaf_end(node))
        line = f"{indent}budgets: {flow}\n"
        if end == -1:
            return f"{text}\n{line}"
        return f"{text[: end + 1]}{line}{text[end + 1 :]}"
    raise ConfigInvalid(f"team {team!r} is written in a way this edit cannot extend; {_BY_HAND}")
