"""What is wrong with a configuration file, said so that a person can fix it (docs/requirements.md
P1).

Two shapes of the same thing:

* ``Finding`` is what a check produces: a location as a *loc* (the keys and list indices from
  the top of the document, the same shape pydantic reports), a message and a hint. Checks know
  nothing about files or lines.
* ``Problem`` is what users see: a ``Finding`` resolved against the YAML source, with the file,
  the 1-based line (``None`` where no line applies) and the loc rendered as a dotted path
  (``teams.team-a.quota.h100.nominal``, ``pools[0].gpu_type``).

Invariant: every problem carries a non-empty hint that says how to fix it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

Loc = tuple[str | int, ...]

# Keys that read unambiguously in a dotted path; anything else is quoted (``teams["a.b"]``)
# so that a path always names exactly one place.
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class Finding:
    """One problem at a loc, before it is tied to a file and line."""

    loc: Loc
    message: str
    hint: str


@dataclass(frozen=True)
class Problem:
    """One problem of a configuration file, as ``gpupool config validate`` prints it."""

    file: str
    line: int | None
    path: str
    message: str
    hint: str

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form, for API error bodies."""
        return asdict(self)

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        what = f"{self.path}: {self.message}" if self.path else self.message
        return f"{where}: {what} — hint: {self.hint}"


def format_path(loc: Iterable[str | int]) -> str:
    """Render a loc as ``teams.team-a.quota.h100`` / ``pools[0].gpu_type``."""
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(str(part)):
            out += f".{part}" if out else str(part)
        else:
            out += f"[{str(part)!r}]"
    return out


def format_problems(problems: Sequence[Problem]) -> str:
    """One line per problem: ``FILE:LINE: PATH: MESSAGE — hint: HINT``."""
    return "\n".join(str(p) for p in problems)


def summarize(problems: Sequence[Problem], source: str) -> str:
    """``"3 problems in demo.yaml"`` — the message of ``ConfigInvalid``."""
    n = len(problems)
    return f"{n} problem{'' if n == 1 else 's'} in {source}"


def quoted_list(names: Iterable[str]) -> str:
    """``h100, t4`` — or ``(none)`` so a hint never ends in a dangling colon."""
    names = list(names)
    return ", ".join(names) if names else "(none)"


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``"did you mean 'nominal'? "`` when a choice is close to ``name``, else ``""``."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}? " if close else ""


def unknown_name_hint(name: str, section: str, known: Iterable[str]) -> str:
    """Hint for a reference to something undefined: suggest a near name, else how to add it."""
    known = list(known)
    suggestion = did_you_mean(name, known)
    if not known:
        return f"{suggestion}add {name!r} under {section}"
    return f"{suggestion}add {name!r} under {section} or use one of: {quoted_list(known)}"
