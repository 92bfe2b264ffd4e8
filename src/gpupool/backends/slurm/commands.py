"""Running Slurm's client commands (sbatch, squeue, scancel, sinfo), injected (docs/code-style.md
§12).

The adapter never calls :mod:`subprocess` itself: it is given a :class:`CommandRunner`.
:class:`SubprocessRunner` runs the real commands; :class:`FakeRunner` answers from a script and
records every call, so tests can assert what was run and how often (one ``squeue`` per poll).

Invariants: a runner returns the command's result whatever its exit status (deciding what a
non-zero status means is :mod:`.errors`' job); it raises only when the command could not be run
at all (``OSError``) or ran past its timeout (``subprocess.TimeoutExpired``).
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

# Slurm's clients retry an unreachable controller for MessageTimeout-bound periods (and for a
# missing slurm.conf, a full minute); the adapter must not hang a control-plane thread on them.
DEFAULT_TIMEOUT_S = 30.0

Result = subprocess.CompletedProcess[str]


class CommandRunner(Protocol):
    def run(
        self, argv: Sequence[str], input: str | None = None, timeout: float = DEFAULT_TIMEOUT_S
    ) -> Result: ...


@dataclass(frozen=True)
class SubprocessRunner:
    """Runs the real commands. ``env`` (e.g. ``{"SLURM_CONF": ...}``) is added to ours."""

    env: Mapping[str, str] | None = None

    def run(
        self, argv: Sequence[str], input: str | None = None, timeout: float = DEFAULT_TIMEOUT_S
    ) -> Result:
        env = {**os.environ, **self.env} if self.env else None
        return subprocess.run(
            list(argv),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=False,
        )


class SlurmCommandError(Exception):
    """A Slurm command exited non-zero (classified by :mod:`.errors`)."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str) -> None:
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr.strip()
        super().__init__(f"{self.argv[0]} exited {returncode}: {self.stderr or '(no output)'}")


class SlurmClientMissing(Exception):
    """A Slurm command is not installed where gpupool runs."""


def run_checked(
    runner: CommandRunner,
    argv: Sequence[str],
    input: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
) -> str:
    """Run ``argv`` and return its stdout; :class:`SlurmCommandError` on a non-zero exit."""
    try:
        done = runner.run(argv, input=input, timeout=timeout)
    except FileNotFoundError as exc:
        raise SlurmClientMissing(f"{argv[0]!r} not found") from exc
    if done.returncode != 0:
        raise SlurmCommandError(argv, done.returncode, done.stderr or done.stdout or "")
    return done.stdout or ""


Handler = Callable[[Sequence[str], str | None], Result]


def result(argv: Sequence[str], stdout: str = "", stderr: str = "", returncode: int = 0) -> Result:
    return subprocess.CompletedProcess(list(argv), returncode, stdout, stderr)


@dataclass
class FakeRunner:
    """A scripted runner for tests. ``handlers`` maps a program (``argv[0]``) to a function of
    ``(argv, input)`` returning a :data:`Result`; a program without a handler "succeeds" with no
    output. Every call is recorded in ``calls`` as ``(argv, input)``."""

    handlers: dict[str, Handler] = field(default_factory=dict)
    calls: list[tuple[list[str], str | None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def on(self, program: str, stdout: str = "", stderr: str = "", returncode: int = 0) -> None:
        """Answer every call of ``program`` with this output."""
        self.handlers[program] = lambda argv, _input: result(argv, stdout, stderr, returncode)

    def run(
        self, argv: Sequence[str], input: str | None = None, timeout: float = DEFAULT_TIMEOUT_S
    ) -> Result:
        with self._lock:
            self.calls.append((list(argv), input))
        handler = self.handlers.get(argv[0])
        return handler(argv, input) if handler else result(argv)

    def programs(self) -> list[str]:
        """The programs called so far, in order."""
        return [argv[0] for argv, _ in self.calls]
