"""Reading YAML while remembering where every value came from.

PyYAML's composed node tree (``yaml.compose``) keeps a start mark on every node; plain
``yaml.load`` throws those away. We compose once with ``SafeLoader`` (never a loader that can
build arbitrary Python objects), keep the tree for line lookups, and construct the plain data
from that same tree so that lines and data cannot disagree.

Invariants:

* ``line_of(loc)`` always returns a line of the document: the line of the deepest node that
  exists along ``loc``. When the last step that matched is a mapping key, the *key's* line is
  used, so an unknown or misspelt key points at itself and a missing key at its parent's key.
* Duplicate keys in one mapping are reported here because PyYAML silently keeps the last one;
  the data still holds the last value, so later checks see what the loader would have used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpupool.spec.problems import Finding, Loc

# The YAML merge key: repeating it is how several anchors are merged, not a duplicate.
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlSyntaxError(Exception):
    """The text is not YAML; ``line`` is 1-based or ``None`` when PyYAML gave no position."""

    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


@dataclass(frozen=True)
class Document:
    """A parsed YAML document: its plain data, the node tree for line lookups, and its
    duplicate keys (found before construction, see :func:`duplicate_keys`)."""

    data: Any
    root: Node | None
    duplicates: list[Finding]

    def line_of(self, loc: Loc) -> int | None:
        """1-based line of the deepest node along ``loc`` (see the module invariants)."""
        if self.root is None:
            return None
        node: Node = self.root
        line = node.start_mark.line + 1
        for part in loc:
            step = _step(node, part)
            if step is None:
                break
            line, node = step
        return line

    def key_loc(self, loc: Loc) -> Loc:
        """``loc`` with every step into a mapping as text: a YAML key ``1`` is a key, not a
        list index, and must print as ``quota.1`` rather than ``quota[1]``."""
        node: Node | None = self.root
        out: list[str | int] = []
        for part in loc:
            if isinstance(node, MappingNode):
                part = str(part)
            out.append(part)
            step = None if node is None else _step(node, part)
            node = None if step is None else step[1]
        return tuple(out)


def parse_yaml(text: str) -> Document:
    """Compose and construct one YAML document; raise ``YamlSyntaxError`` if it is not YAML."""
    try:
        # The reader checks every character as it is made: a control character fails here.
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(None, str(exc)) from exc
    try:
        root = loader.get_single_node()
        duplicates = duplicate_keys(root)
        data = None if root is None else loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else mark.line + 1
        raise YamlSyntaxError(line, _describe(exc)) from exc
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(None, str(exc)) from exc
    finally:
        loader.dispose()
    return Document(data=data, root=root, duplicates=duplicates)


def duplicate_keys(root: Node | None) -> list[Finding]:
    """Every key that appears twice in one mapping, at the second occurrence.

    Must run before construction: constructing flattens merge keys (``<<``) into the mapping
    in place, after which a key that overrides a merged one would look like a duplicate.
    """
    findings: list[Finding] = []
    seen_nodes: set[int] = set()  # aliases share nodes and may even be recursive

    def walk(node: Node, loc: Loc) -> None:
        if id(node) in seen_nodes:
            return
        seen_nodes.add(id(node))
        if isinstance(node, MappingNode):
            first_line: dict[str, int] = {}
            for key, value in node.value:
                if not isinstance(key, ScalarNode) or key.tag == _MERGE_TAG:
                    continue
                line = key.start_mark.line + 1
                if key.value in first_line:
                    findings.append(
                        Finding(
                            loc=(*loc, key.value),
                            message=(
                                f"duplicate key {key.value!r} "
                                f"(first on line {first_line[key.value]})"
                            ),
                            hint="keep only one of them: YAML silently uses the last one",
                        )
                    )
                else:
                    first_line[key.value] = line
                walk(value, (*loc, key.value))
        elif isinstance(node, SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, (*loc, index))

    if root is not None:
        walk(root, ())
    return findings


def _step(node: Node, part: str | int) -> tuple[int, Node] | None:
    """Follow one loc part from ``node``: ``(line, child)``, or ``None`` if it is not there."""
    if isinstance(node, MappingNode):
        # The last match wins, like the loader; pydantic reports keys as constructed values,
        # so compare on their text form (``1`` matches the scalar ``1``).
        found = None
        for key, value in node.value:
            if isinstance(key, ScalarNode) and key.value == str(part):
                found = (key.start_mark.line + 1, value)
        return found
    is_index = isinstance(part, int) and not isinstance(part, bool)
    if isinstance(node, SequenceNode) and is_index and 0 <= int(part) < len(node.value):
        item = node.value[int(part)]
        return item.start_mark.line + 1, item
    return None


def _describe(exc: yaml.MarkedYAMLError) -> str:
    """PyYAML's problem text without its embedded source excerpt."""
    parts = [p for p in (exc.context, exc.problem) if p]
    return "invalid YAML: " + ", ".join(parts) if parts else "invalid YAML"
