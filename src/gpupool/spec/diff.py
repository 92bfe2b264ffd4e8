"""What changes between two cluster configurations, said readably (``gpupool config diff``).

Pure: two :class:`ClusterConfig` in, a list of :class:`Change` out, and :func:`render` for
people. Sections are compared as data (the models dumped with their defaults, so setting a
field to its default value is no change); pools, a list in the file, are compared by name, and
so are a team's budgets.
An entity that appears or disappears (a team, a pool, a user, a cohort, a gpu type, a
priority class) is one change; inside an entity that stays, every field that differs is one
change, a team's members being shown as role changes.

Invariant: ``diff(a, a)`` is empty, and ``diff(a, b)`` is empty only when ``a == b``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from gpupool.spec.models import ClusterConfig

# Sections in the order they are shown; the first group holds named entities.
ENTITY_SECTIONS = ("teams", "pools", "users", "cohorts", "gpu_types", "priority_classes")
SETTING_SECTIONS = ("scheduler", "storage", "accounting")
_SINGULAR = {
    "teams": "team",
    "pools": "pool",
    "users": "user",
    "cohorts": "cohort",
    "gpu_types": "gpu type",
    "priority_classes": "priority class",
}


class Kind(StrEnum):
    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"


@dataclass(frozen=True)
class Change:
    """``section`` (``teams``), ``name`` (the entity, or ``""`` in a settings section),
    ``path`` (fields below the entity, empty for the entity itself), old and new values
    (``None`` where absent)."""

    kind: Kind
    section: str
    name: str
    path: tuple[str, ...] = ()
    old: Any = None
    new: Any = None

    def describe(self) -> str:
        """One line, e.g. ``~ team-a quota.h100.nominal: 4 -> 8``."""
        mark = {Kind.ADDED: "+", Kind.REMOVED: "-", Kind.CHANGED: "~"}[self.kind]
        if self.section == "teams" and self.path[:1] == ("members",) and len(self.path) == 2:
            user = self.path[1]
            if self.kind is Kind.ADDED:
                return f"+ {self.name}: {user} joins as {self.new}"
            if self.kind is Kind.REMOVED:
                return f"- {self.name}: {user} leaves (was {self.old})"
            return f"~ {self.name}: role of {user}: {self.old} -> {self.new}"
        where = " ".join(part for part in (self.name, ".".join(self.path)) if part)
        if not self.path and self.name:  # a whole entity
            value = self.new if self.kind is Kind.ADDED else None
            return f"{mark} {where}" + (f"  {_show(value)}" if value else "")
        if self.kind is Kind.ADDED:
            return f"+ {where}: {_show(self.new)}"
        if self.kind is Kind.REMOVED:
            return f"- {where} (was {_show(self.old)})"
        return f"~ {where}: {_show(self.old)} -> {_show(self.new)}"


def diff(old: ClusterConfig | None, new: ClusterConfig) -> list[Change]:
    """Every change from ``old`` (None: nothing yet) to ``new``, section by section."""
    before = _sections(old) if old is not None else {}
    after = _sections(new)
    shown = _sections(new, exclude_defaults=True)  # what an added entity is shown with
    changes: list[Change] = []
    for section in ENTITY_SECTIONS:
        was, now = before.get(section, {}), after[section]
        for name in sorted(was.keys() - now.keys()):
            changes.append(Change(Kind.REMOVED, section, name, old=was[name]))
        for name in sorted(now.keys() - was.keys()):
            value = shown[section].get(name) or None
            changes.append(Change(Kind.ADDED, section, name, new=value))
        for name in sorted(was.keys() & now.keys()):
            changes.extend(_fields(section, name, (), was[name], now[name]))
    for section in SETTING_SECTIONS:
        changes.extend(_fields(section, "", (), before.get(section, {}), after[section]))
    return changes


def removed(changes: list[Change], section: str) -> list[str]:
    """Names of the entities of ``section`` the changes remove."""
    return [
        c.name for c in changes if c.section == section and c.kind is Kind.REMOVED and not c.path
    ]


def render(changes: list[Change]) -> str:
    """The changes grouped by section, for a terminal; ``no changes`` when there are none."""
    if not changes:
        return "no changes"
    lines: list[str] = []
    for section in (*ENTITY_SECTIONS, *SETTING_SECTIONS):
        mine = [c for c in changes if c.section == section]
        if mine:
            lines.append(section)
            lines.extend(f"  {c.describe()}" for c in mine)
    return "\n".join(lines)


def summarize(changes: list[Change]) -> str:
    """One line for the history, e.g. ``teams: +1 ~2; pools: -1; scheduler: ~1``: entities
    added, removed and changed (once per entity however many fields), settings changed."""
    if not changes:
        return "no changes"
    parts = []
    for section in ENTITY_SECTIONS:
        mine = [c for c in changes if c.section == section]
        added = sum(1 for c in mine if not c.path and c.kind is Kind.ADDED)
        gone = sum(1 for c in mine if not c.path and c.kind is Kind.REMOVED)
        changed = len({c.name for c in mine if c.path})
        counts = [f"{m}{n}" for m, n in (("+", added), ("-", gone), ("~", changed)) if n]
        if counts:
            parts.append(f"{section}: {' '.join(counts)}")
    for section in SETTING_SECTIONS:
        n = sum(1 for c in changes if c.section == section)
        if n:
            parts.append(f"{section}: ~{n}")
    return "; ".join(parts)


def _sections(config: ClusterConfig, exclude_defaults: bool = False) -> dict[str, Any]:
    data = config.model_dump(mode="json", exclude_defaults=exclude_defaults)
    full = config.model_dump(mode="json")
    sections = {key: data.get(key, {}) for key in full}
    pools = data.get("pools", [])
    sections["pools"] = {pool["name"]: _without_name(pool) for pool in pools} if pools else {}
    if exclude_defaults:  # every pool is named even when all else is default
        sections["pools"] = {p.name: sections["pools"].get(p.name, {}) for p in config.pools}
    for team in sections.get("teams", {}).values():
        if isinstance(team, dict) and isinstance(team.get("budgets"), list):
            team["budgets"] = {b["name"]: _without_name(b) for b in team["budgets"]}
    return sections


def _without_name(pool: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in pool.items() if key != "name"}


def _fields(section: str, name: str, path: tuple[str, ...], old: Any, new: Any) -> list[Change]:
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[Change] = []
        for key in sorted(old.keys() | new.keys(), key=str):
            here = (*path, str(key))
            if key not in new:
                changes.append(Change(Kind.REMOVED, section, name, here, old=old[key]))
            elif key not in old:
                changes.append(Change(Kind.ADDED, section, name, here, new=new[key]))
            else:
                changes.extend(_fields(section, name, here, old[key], new[key]))
        return changes
    if old == new:
        return []
    return [Change(Kind.CHANGED, section, name, path, old=old, new=new)]


def _show(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(", ", ": "))
