"""The directory of one attempt, shared by the control plane and the batch job.

``<workdir_root>/<key>/`` must be visible at the same path on the submitting host and on every
node of the partition (a shared file system; on a single-host cluster, any local path).

==============  ==========  ===============================================================
file            written by  content
==============  ==========  ===============================================================
submitted.json  adapter     ``{job_id, job_name}``: written once sbatch accepted the job
cancel          adapter     ``{requested_at, grace_s}``: written by ``cancel()`` before any signal
slurm_job_id    job         ``$SLURM_JOB_ID``, first thing the batch script does
exit_code       job         ``exit_code=N reason=R [max_runtime_s=S]``, last thing it does
output.log      job         the job's stdout and stderr (Slurm's ``--output``)
work/           job         directories: ``inputs/`` and ``outputs/`` too; ``work/`` is cwd
==============  ==========  ===============================================================

Invariants: the attempt dir and the adapter's files belong to the control plane's user (a job
cannot forge ``submitted.json`` or ``cancel``); the files the job writes are created here and
handed to the job's user beforehand, because the batch script cannot create files in the
attempt dir itself. ``exit_code`` and ``slurm_job_id`` are the job's word: they decide only
what Slurm, having forgotten the job, can no longer say.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpupool.backends.base import PosixIdentity
from gpupool.backends.slurm.parsers import ExitRecord, parse_exit_file


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, text.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class AttemptDir:
    path: Path

    @property
    def work(self) -> Path:
        return self.path / "work"

    @property
    def inputs(self) -> Path:
        return self.path / "inputs"

    @property
    def outputs(self) -> Path:
        return self.path / "outputs"

    @property
    def output_log(self) -> Path:
        return self.path / "output.log"

    @property
    def exit_file(self) -> Path:
        return self.path / "exit_code"

    @property
    def job_id_file(self) -> Path:
        return self.path / "slurm_job_id"

    def prepare(self, identity: PosixIdentity | None) -> None:
        """Create the layout (idempotent: a submit that died half-way is redone)."""
        self.path.mkdir(mode=0o711, exist_ok=True)
        os.chmod(self.path, 0o711)  # other uids traverse to their files but cannot list
        for d in (self.work, self.inputs, self.outputs):
            d.mkdir(mode=0o700, exist_ok=True)
        for f in (self.output_log, self.exit_file, self.job_id_file):
            f.touch(mode=0o640, exist_ok=True)
        if identity is not None:
            for p in (self.work, self.inputs, self.outputs):
                os.chown(p, identity.uid, identity.gid)
            for p in (self.output_log, self.exit_file, self.job_id_file):
                os.chown(p, identity.uid, identity.gid)

    # -- the adapter's records ------------------------------------------------------------------

    def submitted(self) -> dict[str, Any] | None:
        return _read_json(self.path / "submitted.json")

    def record_submitted(self, job_id: str, job_name: str) -> None:
        payload = json.dumps({"job_id": job_id, "job_name": job_name})
        write_atomic(self.path / "submitted.json", payload)

    def cancel_request(self) -> dict[str, Any] | None:
        return _read_json(self.path / "cancel")

    def record_cancel(self, requested_at: float, grace_s: float) -> None:
        payload = json.dumps({"requested_at": requested_at, "grace_s": grace_s})
        write_atomic(self.path / "cancel", payload)

    # -- the job's records ----------------------------------------------------------------------

    def exit_record(self) -> ExitRecord | None:
        try:
            return parse_exit_file(self.exit_file.read_text(errors="replace"))
        except FileNotFoundError:
            return None

    def job_id_written_by_job(self) -> str | None:
        try:
            text = self.job_id_file.read_text().strip()
        except FileNotFoundError:
            return None
        return text if text.isdigit() else None
