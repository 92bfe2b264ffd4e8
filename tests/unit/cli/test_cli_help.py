"""Every command's help reads as a CLI's help: value names such as TEXT and INTEGER, flags
without one, never Python types (``--json <bool>``, ``<list[str]>``)."""

from __future__ import annotations

import re
from typing import Any

import typer.main
from typer.testing import CliRunner

from gpupool.cli.main import app

PYTHON_TYPES = re.compile(r"<(?:str|int|float|bool|path|list\[[^\]]*\]|int range|float range)>")


def command_paths(command: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        found += command_paths(sub, (*prefix, name))
    return found


def test_no_help_shows_python_types(runner: CliRunner) -> None:
    paths = command_paths(typer.main.get_command(app))
    assert ("submit",) in paths and len(paths) > 20
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "120"})
        assert result.exit_code == 0, (path, result.output)
        found = PYTHON_TYPES.findall(result.output)
        assert not found, f"gpupool {' '.join(path)} --help shows {found}"
    submit = runner.invoke(app, ["submit", "--help"], env={"COLUMNS": "120"}).output
    assert re.search(r"--gpus\s+INTEGER RANGE", submit)
    assert re.search(r"--json\s{3,}Print", submit)  # a flag takes no value
