"""The directory of one attempt, on a file system the control plane and the nodes share.

``<root>/<key>/`` is mounted into the Job's pods at the same path (a ``hostPath`` of a shared
mount, or a PersistentVolumeClaim's ``subPath``), so the paths in the contract variables are
the same for the control plane and for the job.

=============  ==========  ================================================================
entry          written by  content
=============  ==========  ================================================================
work/          job         its working directory; ``inputs/`` and ``outputs/`` beside it
submitted      adapter     ``{namespace, name}``: once the Job was created (or adopted)
cancel         adapter     ``{requested_at, grace_s}``: written by ``cancel()`` before any delete
final          adapter     the final status, once seen: the answer after the Job is gone
=============  ==========  ================================================================

Invariants: the adapter's records belong to the control plane's user and are written
atomically; the job's directories are handed to the job's uid and gid when the control plane
runs as root (otherwise the pods must run as the control plane's user, or the file system
must let them write).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpupool.backends.base import BackendStatus, PosixIdentity, RunState


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
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

    def prepare(self, owner: PosixIdentity | None) -> None:
        """Create the layout (idempotent: a submit that died half-way is redone)."""
        self.path.mkdir(mode=0o711, parents=True, exist_ok=True)
        for d in (self.work, self.inputs, self.outputs):
            d.mkdir(mode=0o700, exist_ok=True)
            if owner is not None:
                os.chown(d, owner.uid, owner.gid)

    def submitted(self) -> dict[str, Any] | None:
        return _read_json(self.path / "submitted")

    def record_submitted(self, namespace: str, name: str) -> None:
        _write_atomic(self.path / "submitted", json.dumps({"namespace": namespace, "name": name}))

    def cancel_request(self) -> dict[str, Any] | None:
        return _read_json(self.path / "cancel")

    def record_cancel(self, requested_at: float, grace_s: float) -> None:
        _write_atomic(
            self.path / "cancel", json.dumps({"requested_at": requested_at, "grace_s": grace_s})
        )

    def final(self) -> BackendStatus | None:
        found = _read_json(self.path / "final")
        if found is None:
            return None
        try:
            state = RunState(found["state"])
        except (KeyError, ValueError):
            return None
        code = found.get("exit_code")
        return BackendStatus(
            state, code if isinstance(code, int) else None, str(found.get("message", ""))
        )

    def record_final(self, status: BackendStatus) -> None:
        if not self.path.is_dir():
            return  # a handle of another control plane's disk: nothing to remember here
        payload = {
            "state": status.state.value,
            "exit_code": status.exit_code,
            "message": status.message,
        }
        _write_atomic(self.path / "final", json.dumps(payload))
