"""The repository speaks for itself: no file refers to a document that is not in it, and every
relative link of the README and docs/ leads to a file that exists."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Design notes kept outside the repository; what the code needs of them is in docs/.
OUTSIDE = re.compile(
    r"\bDESIGN(\.md\b| §)|\bSTYLE(\.md\b| §)|\bREQUIREMENTS(\.md\b| [A-Z]\d)|\.\./shared\b"
)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
DOC_PATH = re.compile(r"\bdocs/[\w./-]+\.md\b")


def tracked() -> list[Path]:
    names = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in names if (ROOT / name).is_file()]


def text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def test_no_file_refers_to_design_notes_outside_the_repository() -> None:
    this = Path(__file__).resolve()
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in tracked()
        if path.resolve() != this and (text := text_of(path)) is not None
        for n, line in enumerate(text.splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert found == []


def test_relative_links_of_the_docs_lead_to_files() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    broken = [
        f"{page.relative_to(ROOT)} -> {target}"
        for page in pages
        for target in LINK.findall(page.read_text(encoding="utf-8"))
        if "://" not in target
        and not target.startswith("mailto:")
        and not (page.parent / target).exists()
    ]
    assert broken == []


def test_every_docs_page_the_code_names_exists() -> None:
    named = {
        match
        for path in tracked()
        if path.suffix in (".py", ".md", ".yaml", ".sh") and (text := text_of(path)) is not None
        for match in DOC_PATH.findall(text)
    }
    assert sorted(name for name in named if not (ROOT / name).exists()) == []
