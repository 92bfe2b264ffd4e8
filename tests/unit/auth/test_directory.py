"""Reading the directory file: group -> users becomes user -> groups, or a clear error."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from gpupool.auth.directory import Directory, invert


@dataclass
class Case:
    data: object
    want: dict[str, frozenset[str]] | None = None
    want_error: str = ""


CASES = [
    pytest.param(Case(None, {}), id="empty file"),
    pytest.param(
        Case(
            {"TeamA": ["alice", "dave"], "TeamB": ["dave"], "Empty": None},
            {"alice": frozenset({"TeamA"}), "dave": frozenset({"TeamA", "TeamB"})},
        ),
        id="users in several groups",
    ),
    pytest.param(Case(["alice"], want_error="mapping of group name"), id="not a mapping"),
    pytest.param(Case({"TeamA": "alice"}, want_error="group 'TeamA'"), id="users not a list"),
    pytest.param(Case({"TeamA": [1, 2]}, want_error="group 'TeamA'"), id="users not names"),
]


@pytest.mark.parametrize("case", CASES)
def test_invert(case: Case) -> None:
    if case.want_error:
        with pytest.raises(ValueError, match=case.want_error):
            invert(case.data)
    else:
        assert invert(case.data) == case.want


def test_directory_follows_the_file(tmp_path: Path) -> None:
    path = tmp_path / "directory.json"
    directory = Directory(path)
    assert directory.groups_of("dave") == frozenset()  # missing: nothing
    path.write_text('{"TeamA": ["dave"]}')
    assert directory.groups_of("dave") == frozenset({"TeamA"})
    path.unlink()
    assert directory.groups_of("dave") == frozenset()
