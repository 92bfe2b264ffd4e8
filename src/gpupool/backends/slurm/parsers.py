"""Pure parsers of Slurm's command output and of the files a batch job leaves behind.

Every function here takes text and returns values; none runs a command or reads a file. The
recorded outputs they are tested on live in ``tests/backends/testdata/slurm/``. A parser raises
``ValueError`` naming the offending line when the text is not what the command prints: the
adapter turns that into ``BackendUnavailable`` (a Slurm we do not understand right now must
never be read as "the job is gone").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# ``squeue -O`` fields, each with the suffix "|" and no width (so nothing is padded or cut).
# The job name is last: it is the only free-text field, and ours never contain "|".
SQUEUE_FIELDS = ("JobID", "State", "Reason", "exit_code", "Name")
SQUEUE_FORMAT = ",".join(f"{name}:|" for name in SQUEUE_FIELDS)

SINFO_FIELDS = ("NodeList", "StateLong", "Gres", "GresUsed")
SINFO_FORMAT = ",".join(f"{name}:|" for name in SINFO_FIELDS)

_JOB_ID = re.compile(r"\d+\Z")


def parse_sbatch_parsable(stdout: str) -> str:
    """The job id printed by ``sbatch --parsable``: ``"123"``, or ``"123;cluster"`` on a
    multi-cluster setup. Warnings may precede it on their own lines; the id is the last line."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise ValueError("sbatch printed no job id")
    job_id = lines[-1].split(";", 1)[0]
    if not _JOB_ID.match(job_id):
        raise ValueError(f"sbatch printed {lines[-1]!r}, not a job id")
    return job_id


@dataclass(frozen=True, slots=True)
class SqueueRow:
    job_id: str
    state: str  # Slurm's base state, e.g. RUNNING, COMPLETING, CANCELLED
    reason: str  # why it is pending or how it ended, e.g. Resources, NonZeroExitCode, None
    exit_status: int | None  # the raw wait(2) status of the batch script, None while unknown
    name: str


def parse_squeue(stdout: str) -> list[SqueueRow]:
    """Rows of ``squeue -h -O`` with :data:`SQUEUE_FORMAT`."""
    rows = []
    for number, line in enumerate(stdout.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.rstrip("\n").split("|", len(SQUEUE_FIELDS) - 1)
        if len(parts) != len(SQUEUE_FIELDS):
            raise ValueError(f"squeue line {number}: {line!r} has not {len(SQUEUE_FIELDS)} fields")
        job_id, state, reason, exit_status, name = (p.strip() for p in parts)
        name = name.removesuffix("|")
        if not _JOB_ID.match(job_id):
            # Array and heterogeneous jobs print "12_3" or "12+1"; gpupool submits neither.
            raise ValueError(f"squeue line {number}: job id {job_id!r} is not a plain number")
        # "CANCELLED by 0" is how some versions print a cancelled job's state.
        rows.append(SqueueRow(job_id, state.split()[0], reason, _int_or_none(exit_status), name))
    return rows


def decode_wait_status(status: int) -> tuple[int, int | None]:
    """``(exit_code, signal)`` from a raw wait status: Slurm's ``exit_code`` field (squeue -O)
    is the batch script's ``wait(2)`` status. A signal death reads as ``128 + signal``, the
    shell's convention and the local backend's."""
    signal = status & 0x7F
    if signal:
        return 128 + signal, signal
    return (status >> 8) & 0xFF, None


@dataclass(frozen=True, slots=True)
class ExitRecord:
    """What the batch script wrote to ``exit_code`` when the command ended (see :mod:`.script`).

    ``reason`` is ``exited`` or ``max_runtime`` (the command outlived ``max_runtime_s`` and
    ``timeout(1)`` stopped it)."""

    exit_code: int
    reason: str
    max_runtime_s: int | None = None


def parse_exit_file(text: str) -> ExitRecord | None:
    """``exit_code=N reason=R [max_runtime_s=S]``; None for an empty or partial file (the
    script is still writing it, or the job was killed before it could)."""
    fields = dict(token.split("=", 1) for token in text.split() if "=" in token)
    code = _int_or_none(fields.get("exit_code", ""))
    reason = fields.get("reason", "")
    if code is None or not reason or not text.endswith("\n"):
        return None
    return ExitRecord(code, reason, _int_or_none(fields.get("max_runtime_s", "")))


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    name: str
    state: str
    gpus: int  # GPUs of the pool's type on the node
    gpus_used: int

    @property
    def usable(self) -> bool:
        """Up and schedulable: not down, drained, failing or not responding ("*")."""
        state = self.state.lower()
        return not state.endswith("*") and not any(bad in state for bad in _UNUSABLE)


_UNUSABLE = ("down", "drain", "fail", "maint", "unknown", "inval", "future", "power", "reboot")


@dataclass(frozen=True, slots=True)
class SlurmCapacity:
    """GPUs of one type in one partition, as ``sinfo`` reports them."""

    nodes: tuple[NodeCapacity, ...]

    @property
    def usable_nodes(self) -> int:
        return sum(1 for n in self.nodes if n.usable)

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes if n.usable)

    @property
    def gpus_free(self) -> int:
        return sum(max(0, n.gpus - n.gpus_used) for n in self.nodes if n.usable)


def parse_sinfo_capacity(stdout: str, gres_type: str) -> SlurmCapacity:
    """``sinfo -h -N -p P -O`` with :data:`SINFO_FORMAT`, counting GPUs of ``gres_type``.

    A node listed twice (it is in several of the listed partitions) is counted once."""
    nodes: dict[str, NodeCapacity] = {}
    for number, line in enumerate(stdout.splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < len(SINFO_FIELDS):
            raise ValueError(f"sinfo line {number}: {line!r} has not {len(SINFO_FIELDS)} fields")
        name, state, gres, used = (p.strip() for p in parts[: len(SINFO_FIELDS)])
        nodes.setdefault(
            name,
            NodeCapacity(name, state, _gres_count(gres, gres_type), _gres_count(used, gres_type)),
        )
    return SlurmCapacity(tuple(nodes[name] for name in sorted(nodes)))


def _gres_count(gres: str, gres_type: str) -> int:
    """GPUs of ``gres_type`` in a gres string such as ``gpu:h100:2(S:0),gpu:t4:0(IDX:N/A)``."""
    return sum(int(count) for kind, count in _gres_items(gres) if kind == gres_type)


def _gres_items(gres: str) -> Iterable[tuple[str, str]]:
    # Split on commas outside parentheses: "(IDX:0,2)" holds commas of its own.
    for item in re.split(r",(?![^(]*\))", gres):
        match = re.match(r"gpu:([^:(]+):(\d+)", item.strip())
        if match:
            yield match.group(1), match.group(2)


def _int_or_none(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
