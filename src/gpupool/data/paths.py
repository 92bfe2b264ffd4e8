"""Job input and output paths, relative to the team's storage root (docs/requirements.md D1).

A team's root holds ``shared/`` (the whole team) and ``home/<user>/`` (one member). Jobs
declare ``inputs`` and ``outputs`` as paths under it, e.g. ``shared/datasets/x`` or
``home/alice/ckpt``. Invariants this module owns:

* A valid path is canonical: relative, '/'-separated, no empty, '.' or '..' component, no
  backslash or control character; one trailing '/' is accepted and dropped.
* Every path lies under ``shared/`` or under the submitting user's own ``home/<user>/``:
  a job never names another member's home, for reading or for writing.
* An output names something below its area (``shared/x``, not ``shared``): each attempt
  writes under ``<output>/attempt-<n>/`` (:func:`attempt_prefix`), never over a sibling.

Pure functions: nothing here touches a file system.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_PATH_LEN = 1024
SHARED = "shared"
HOME = "home"


class PathProblem(ValueError):
    """A path that cannot be used; the message says why and what to write instead."""


def canonical(path: str) -> str:
    """``path`` in canonical form, or :class:`PathProblem` naming what is wrong with it."""
    if not path or not path.strip():
        raise PathProblem("empty path; name a path under shared/ or home/<user>/")
    if len(path) > MAX_PATH_LEN:
        raise PathProblem(f"longer than {MAX_PATH_LEN} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise PathProblem("contains a control character")
    if "\\" in path:
        raise PathProblem("contains '\\'; separate components with '/'")
    if path.startswith("/") or path.startswith("~"):
        raise PathProblem(
            "absolute path; write it relative to the team's storage root, e.g. shared/datasets/x"
        )
    trimmed = path[:-1] if path.endswith("/") else path
    parts = trimmed.split("/")
    if ".." in parts:
        raise PathProblem("contains '..'; paths may not leave the team's storage root")
    if any(p in ("", ".") for p in parts):
        raise PathProblem("contains an empty or '.' component; remove the extra '/' or '.'")
    return "/".join(parts)


def check_path(path: str, user: str, *, output: bool = False) -> str:
    """The canonical form of a job path of ``user``; :class:`PathProblem` if not allowed."""
    clean = canonical(path)
    parts = clean.split("/")
    own_home = f"{HOME}/{user}/"
    if parts[0] == SHARED:
        area_depth = 1
    elif parts[0] == HOME and len(parts) >= 2 and parts[1] == user:
        area_depth = 2
    elif parts[0] == HOME and len(parts) >= 2:
        raise PathProblem(
            f"home/{parts[1]} is another user's home; use shared/... or {own_home}..."
        )
    else:
        raise PathProblem(f"not under shared/ or {own_home}; e.g. shared/{clean}")
    if output and len(parts) <= area_depth:
        area = "/".join(parts[:area_depth])
        raise PathProblem(f"an output needs a name below {area}/, e.g. {area}/results")
    return clean


def check_job_paths(
    inputs: Sequence[str], outputs: Sequence[str], user: str
) -> tuple[list[str], list[str], list[dict[str, str]]]:
    """Canonical inputs and outputs, and one ``{"field", "message"}`` per bad path
    (``inputs[1]``, ``outputs[0]``, ...) so a single 422 names every one."""
    problems: list[dict[str, str]] = []
    checked: dict[str, list[str]] = {"inputs": [], "outputs": []}
    first_output: dict[str, int] = {}
    for field, paths in (("inputs", inputs), ("outputs", outputs)):
        for i, path in enumerate(paths):
            try:
                clean = check_path(path, user, output=field == "outputs")
            except PathProblem as exc:
                problems.append({"field": f"{field}[{i}]", "message": str(exc)})
                continue
            if field == "outputs":
                # Two attempts' prefixes of one output would coincide: one name, one output.
                if clean in first_output:
                    message = f"same as outputs[{first_output[clean]}]"
                    problems.append({"field": f"outputs[{i}]", "message": message})
                    continue
                first_output[clean] = i
            checked[field].append(clean)
    return checked["inputs"], checked["outputs"], problems


def attempt_prefix(output: str, attempt: int) -> str:
    """Where attempt ``attempt`` of a job writes its ``output``: a fresh prefix per attempt,
    so a retried or preempted attempt never mixes its files with an earlier one's."""
    return f"{output}/attempt-{attempt}"


def within(path: str, scope: str) -> bool:
    """``path`` is ``scope`` itself or lies below it (both canonical)."""
    return path == scope or path.startswith(scope + "/")
