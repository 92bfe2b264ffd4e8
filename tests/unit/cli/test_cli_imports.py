"""Import rule (docs/architecture.md §3): ``client`` and ``cli`` never import server-side code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import gpupool

FORBIDDEN = ("server", "state", "controller", "scheduler", "backends")
PACKAGE = Path(gpupool.__file__).parent
OPERATOR_MODULES = frozenset({"operator.py", "db.py", "doctor.py", "export.py", "export_azure.py"})


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


def test_a_server_command_without_the_server_packages_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpupool.cli import main as cli_main

    def server_side() -> None:
        raise ModuleNotFoundError("No module named 'sqlalchemy'", name="sqlalchemy")

    monkeypatch.setattr(cli_main, "app", server_side)
    with pytest.raises(SystemExit) as exited:
        cli_main.main()
    assert exited.value.code == 1
    err = capsys.readouterr().err
    assert "sqlalchemy is missing" in err and "pip install 'gpupool[server]'" in err


def test_a_missing_module_of_another_kind_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpupool.cli import main as cli_main

    def broken() -> None:
        raise ModuleNotFoundError("No module named 'gpupool.nope'", name="gpupool.nope")

    monkeypatch.setattr(cli_main, "app", broken)
    with pytest.raises(ModuleNotFoundError):
        cli_main.main()
