"""The import rules of docs/architecture.md §3, checked on the source so a new module cannot break
them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "gpupool"

# package -> gpupool packages it must never import (module level or inside functions)
FORBIDDEN = {
    "core": {
        "scheduler",
        "state",
        "backends",
        "auth",
        "controller",
        "server",
        "client",
        "cli",
        "spec",
        "config",
    },
    "scheduler": {
        "state",
        "backends",
        "auth",
        "controller",
        "server",
        "client",
        "cli",
        "spec",
        "config",
    },
    "backends": {"scheduler", "server", "state", "controller", "auth", "spec"},
    "client": {"server", "state", "controller", "scheduler", "backends", "auth", "spec"},
    # pricing, periods, reports and budget rules are pure: the ledger is read by state/.
    "accounting": {"state", "backends", "controller", "server", "client", "cli", "auth"},
    "spec": {"accounting", "state", "controller", "server", "client", "cli"},
    # manifests and admission decisions from the configuration; never the store or a server.
    "k8s": {"scheduler", "state", "controller", "server", "client", "cli", "backends"},
}
# The CLI's user commands speak to the server through the SDK only; operator commands
# (server, token, config; db; doctor) work on the local store and simulate runs the simulator
# in-process, export renders a configuration file; they import lazily inside functions.
CLI_EXEMPT = {
    "operator.py",
    "db.py",
    "doctor.py",
    "simulate.py",
    "export.py",
    "export_kubernetes.py",
    "export_azure.py",
    "webhook.py",
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "gpupool" and len(parts) > 1:
                found.add(parts[1])
    return found


def modules(package: str) -> list[Path]:
    return sorted((SRC / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_respect_the_layering(package: str) -> None:
    offenders = {
        str(path.relative_to(SRC)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in modules(package)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_cli_user_commands_use_only_the_sdk() -> None:
    server_side = {"server", "state", "controller", "scheduler", "backends", "auth", "spec"}
    offenders = {
        path.name: sorted(imported_packages(path) & server_side)
        for path in modules("cli")
        if path.name not in CLI_EXEMPT
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_scheduler_and_core_read_no_clock_or_environment() -> None:
    banned = ("time.time(", "datetime.now(", "os.environ", "getenv(", "random.", "logging.")
    hits = [
        f"{path.relative_to(SRC)}: {word}"
        for package in ("core", "scheduler")
        for path in modules(package)
        for word in banned
        if word in path.read_text(encoding="utf-8")
    ]
    assert hits == []


# The store layer: SQL lives in gpupool.state only, behind its repositories. Other
# packages get Session, SessionFactory, Engine and IntegrityError from gpupool.state.db.
STORE_LIBRARIES = {"sqlalchemy", "alembic"}


def third_party_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
    return found


@pytest.mark.parametrize(
    "package",
    sorted(p.name for p in SRC.iterdir() if p.is_dir() and p.name not in {"state", "__pycache__"}),
)
def test_only_the_store_imports_sqlalchemy(package: str) -> None:
    offenders = {
        str(path.relative_to(SRC)): sorted(third_party_roots(path) & STORE_LIBRARIES)
        for path in modules(package)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_store_rule_sees_an_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from sqlalchemy.orm import Session\n", encoding="utf-8")
    assert third_party_roots(module) & STORE_LIBRARIES == {"sqlalchemy"}
