"""Import rule (DESIGN §3): ``client`` and ``cli`` never import server-side code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gpupool

FORBIDDEN = ("server", "state", "controller", "scheduler", "backends")
PACKAGE = Path(gpupool.__file__).parent
OPERATOR_MODULES = frozenset({"operator.py", "db.py", "doctor.py"})


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", ["client", "cli"])
def test_client_side_never_imports_server_side(layer: str) -> None:
    offenders = [
        f"{path.name}: {module}"
        for path in sorted((PACKAGE / layer).glob("*.py"))
        # The operator's commands (server, token, config; db; doctor) work on the store itself.
        if path.name not in OPERATOR_MODULES
        for module in imported_modules(path)
        if module.split(".")[:2] in (["gpupool", name] for name in FORBIDDEN)
    ]
    assert offenders == []
