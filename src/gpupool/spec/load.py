"""Load a cluster configuration file and report every problem in it, with file and line.

The pipeline, each stage reporting all it finds before the next one runs:

1. YAML syntax (``source.parse_yaml``). A syntax error stops here: nothing else is knowable.
2. Duplicate keys and the top-level shape (a mapping of sections).
3. The models (``gpupool.spec.models``), strictly: YAML already types its scalars, so a quoted
   ``"2"`` where a number belongs or ``yes`` for a count is a mistake, not something to coerce.
4. Cross-references (``gpupool.spec.checks``), only when step 3 produced a ``ClusterConfig``:
   they need the whole structure to mean anything.

Findings are then tied to lines via the composed YAML tree and sorted by line, so the output
reads top to bottom like the file. ``validate_config_text`` returns them (what
``gpupool config validate`` prints); ``parse_config``/``load_config`` raise ``ConfigInvalid``
with them as ``details``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from gpupool.core.errors import ConfigInvalid
from gpupool.spec.checks import check_config
from gpupool.spec.models import ClusterConfig
from gpupool.spec.problems import Finding, Problem, format_path, summarize
from gpupool.spec.schema_errors import KEY_MARKER, validation_findings
from gpupool.spec.source import Document, YamlSyntaxError, parse_yaml

SYNTAX_HINT = (
    "fix the YAML here: indent with spaces (not tabs), put ': ' after each key, "
    "and close every quote and bracket"
)
# PyYAML's wording for the errors whose fix is more specific than SYNTAX_HINT.
SPECIFIC_SYNTAX_HINTS = {
    "'\\t'": "indent with spaces: YAML does not allow tabs",
    "single document": "remove the '---' separator: the configuration is a single document",
}
SHAPE_HINT = "start with top-level keys such as gpu_types:, pools:, teams: (see examples/demo.yaml)"


def load_config(path: Path) -> ClusterConfig:
    """Read and validate the file at ``path``; raise ``ConfigInvalid`` listing every problem."""
    return parse_config(_read(path), source=str(path))


def parse_config(text: str, source: str = "<string>") -> ClusterConfig:
    """Validate YAML ``text``; ``source`` names it in problems (usually the file path)."""
    config, problems = _validate(text, source)
    if problems or config is None:
        raise ConfigInvalid(summarize(problems, source), details=problems)
    return config


def validate_config_text(text: str, source: str = "<string>") -> list[Problem]:
    """Every problem of ``text``, sorted by line; empty when it is a valid configuration."""
    return _validate(text, source)[1]


def validate_config_file(path: Path) -> list[Problem]:
    """Like ``validate_config_text`` for a file; an unreadable file is one problem."""
    try:
        text = _read(path)
    except ConfigInvalid as exc:
        return list(exc.details)
    return validate_config_text(text, source=str(path))


def _validate(text: str, source: str) -> tuple[ClusterConfig | None, list[Problem]]:
    try:
        doc = parse_yaml(text)
    except YamlSyntaxError as exc:
        hint = next(
            (h for needle, h in SPECIFIC_SYNTAX_HINTS.items() if needle in exc.message), SYNTAX_HINT
        )
        return None, [Problem(source, exc.line, "", exc.message, hint)]

    findings = list(doc.duplicates)
    config = None
    if doc.data is None:
        findings.append(Finding((), "the file is empty", SHAPE_HINT))
    elif not isinstance(doc.data, dict):
        kind = "a list" if isinstance(doc.data, list) else "a single value"
        findings.append(
            Finding((), f"the top level must be a mapping of sections, not {kind}", SHAPE_HINT)
        )
    else:
        try:
            config = ClusterConfig.model_validate(doc.data, strict=True)
        except ValidationError as exc:
            findings.extend(validation_findings(exc))
        else:
            findings.extend(check_config(config))

    problems = [_locate(f, doc, source) for f in findings]
    # Sorted by line (stable, so same-line problems keep stage order); line-less ones first.
    problems.sort(key=lambda p: p.line or 0)
    return (None if problems else config), problems


def _locate(finding: Finding, doc: Document, source: str) -> Problem:
    path = format_path(part for part in doc.key_loc(finding.loc) if part != KEY_MARKER)
    return Problem(source, doc.line_of(finding.loc), path, finding.message, finding.hint)


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        problem = Problem(str(path), None, "", f"not UTF-8 text: {exc.reason}", "save as UTF-8")
    except OSError as exc:
        problem = Problem(
            str(path), None, "", f"cannot read: {exc.strerror or exc}", "check the path"
        )
    raise ConfigInvalid(summarize([problem], str(path)), details=[problem])
