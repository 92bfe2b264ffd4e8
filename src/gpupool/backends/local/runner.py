"""The per-attempt supervisor: ``python -m gpupool.backends.local.runner <attempt_dir>``.

One runner supervises one attempt of the local backend. The adapter starts it in a new
session and it detaches at once (double fork), so that a SIGKILL or exit of the control plane
neither signals nor reaps it: jobs outlive the server, and a restarted server re-attaches by
reading the files below. The runner and the adapter only talk through these files, plus one
SIGTERM from ``cancel()``.

Files in the attempt dir (JSON is written atomically, tmp + ``os.replace``, so a reader never
sees half a file):

============  ==========  ==================================================================
file          written by  content
============  ==========  ==================================================================
spec.json     adapter     argv, env, cwd, uid/gid/groups, max_runtime_s, grace defaults
handle.json   runner      ``{pid, create_time}`` of the runner, written first after detaching
job.json      runner      ``{pid, create_time}`` of the job leader (= its process group id)
output.log    job         the job's stdout and stderr
cancel        adapter     grace seconds, written by ``cancel()`` before it signals the runner
exit.json     runner      ``{exit_code, reason, finished_at, message}``, once, at the very end
runner.log    runner      the runner's own stderr: diagnostics if it fails
============  ==========  ==================================================================

Invariants: ``exit.json`` is written at most once and only after the job's whole process group
is dead (so a reader that sees it also sees the complete ``output.log``); the job never starts
if ``cancel`` existed first. ``reason`` is one of exited, cancelled, max_runtime, signal,
start_failed, runner_error.

Only the stdlib may be imported at start (the runner starts once per attempt, and its start-up
is part of every job's latency). :func:`create_time` reads the process start time from
``/proc`` exactly as psutil computes it, so the adapter's psutil-based liveness check agrees;
elsewhere psutil is imported only then.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SPEC = "spec.json"
HANDLE = "handle.json"
JOB = "job.json"
EXIT = "exit.json"
CANCEL = "cancel"
OUTPUT = "output.log"
RUNNER_LOG = "runner.log"
WORK, INPUTS, OUTPUTS = "work", "inputs", "outputs"

TICK_S = 0.05  # how quickly cancel, max runtime and job exit are noticed
DEFAULT_GRACE_S = 10.0


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` so that readers see the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def create_time(pid: int) -> float:
    """Seconds since the epoch at which ``pid`` started, as ``psutil.Process.create_time``.

    Linux: boot time (``btime`` of /proc/stat) plus the start tick of /proc/<pid>/stat over
    the clock rate, the formula psutil uses. Other systems: psutil itself.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime"))
    except FileNotFoundError:
        import psutil  # not Linux: pay for the import only here

        return float(psutil.Process(pid).create_time())
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = stat[stat.rindex(b")") + 2 :].split()
    return float(boot) + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def write_json_atomic(path: Path, data: dict[str, Any], mode: int = 0o644) -> None:
    write_atomic(path, json.dumps(data).encode(), mode)


def read_json(path: Path) -> dict[str, Any] | None:
    """The file's object, or None when it does not exist (yet)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except ValueError:  # cannot happen with write_atomic; a damaged disk reads as "not there"
        return None
    return data if isinstance(data, dict) else None


def read_grace(path: Path, default: float) -> float:
    try:
        return max(0.0, float(path.read_text().strip()))
    except (OSError, ValueError):
        return default


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is gone
        os.killpg(pgid, sig)


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Runner:
    def __init__(self, attempt: Path) -> None:
        self.dir = attempt
        self.terminate = False

    def _on_term(self, signum: int, frame: object) -> None:
        self.terminate = True

    def _cancel_requested(self) -> bool:
        return self.terminate or (self.dir / CANCEL).exists()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        pid = os.getpid()
        # Install the handler before publishing our pid: a SIGTERM sent by cancel() must never
        # hit the default action and kill the runner without an exit.json.
        write_json_atomic(self.dir / HANDLE, {"pid": pid, "create_time": create_time(pid)})
        if (self.dir / EXIT).exists():
            return 0
        try:
            result = self._supervise()
        except BaseException as exc:  # report, never die silently: silence would read as LOST
            result = {"exit_code": None, "reason": "runner_error", "message": f"runner: {exc!r}"}
        result["finished_at"] = time.time()
        write_json_atomic(self.dir / EXIT, result)
        return 0

    def _supervise(self) -> dict[str, Any]:
        spec = read_json(self.dir / SPEC)
        if spec is None:
            return {"exit_code": None, "reason": "runner_error", "message": "spec.json missing"}
        if self._cancel_requested():
            return {"exit_code": None, "reason": "cancelled", "message": "cancelled before start"}
        try:
            child = self._start(spec)
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            message = f"cannot start command {spec['argv'][0]!r}: {exc}"
            with open(self.dir / OUTPUT, "a", encoding="utf-8") as log:
                log.write(f"gpupool: {message}\n")
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            return {"exit_code": code, "reason": "start_failed", "message": message}
        try:
            job_ct = create_time(child.pid)
        except (OSError, ValueError):
            job_ct = 0.0
        write_json_atomic(self.dir / JOB, {"pid": child.pid, "create_time": job_ct})
        return self._wait(child, spec)

    def _start(self, spec: dict[str, Any]) -> subprocess.Popen[bytes]:
        identity: dict[str, Any] = {}
        if spec.get("uid") is not None:
            # extra_groups=[] also clears the runner's (root's) supplementary groups.
            identity = {
                "user": int(spec["uid"]),
                "group": int(spec["gid"]),
                "extra_groups": [int(g) for g in spec.get("groups", [])],
            }
        log_fd = os.open(self.dir / OUTPUT, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
        try:
            return subprocess.Popen(
                list(spec["argv"]),
                cwd=spec["cwd"],
                env=dict(spec["env"]),
                stdin=subprocess.DEVNULL,
                stdout=log_fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: signals reach all its children
                close_fds=True,
                **identity,
            )
        finally:
            os.close(log_fd)

    def _wait(self, child: subprocess.Popen[bytes], spec: dict[str, Any]) -> dict[str, Any]:
        max_runtime = spec.get("max_runtime_s")
        start = time.monotonic()
        deadline = start + float(max_runtime) if max_runtime else None
        cancel_default = float(spec.get("cancel_grace_s", DEFAULT_GRACE_S))
        reason: str | None = None
        grace = 0.0
        kill_at: float | None = None
        while (rc := child.poll()) is None:
            now = time.monotonic()
            if reason is None:
                if self._cancel_requested():
                    reason = "cancelled"
                    grace = read_grace(self.dir / CANCEL, cancel_default)
                elif deadline is not None and now >= deadline:
                    reason = "max_runtime"
                    grace = float(spec.get("max_runtime_grace_s", DEFAULT_GRACE_S))
                if reason is not None:
                    _signal_group(child.pid, signal.SIGTERM)
                    kill_at = now + grace
            elif kill_at is not None and now >= kill_at:
                _signal_group(child.pid, signal.SIGKILL)
                kill_at = None
            time.sleep(TICK_S)
        # The attempt ends with its leader. Whatever it left in its group would keep holding
        # the GPUs it was given, so it goes too (and exit.json then means "nothing left").
        _signal_group(child.pid, signal.SIGKILL)
        exit_code = rc if rc >= 0 else 128 - rc
        if reason == "cancelled":
            message = f"cancelled (grace {grace:g}s)"
        elif reason == "max_runtime":
            message = f"exceeded max_runtime_s={max_runtime}"
        elif rc < 0:
            reason, message = "signal", f"killed by {_signal_name(-rc)}"
        else:
            reason, message = "exited", "" if rc == 0 else f"exited with code {rc}"
        return {"exit_code": exit_code, "reason": reason, "message": message}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m gpupool.backends.local.runner ATTEMPT_DIR", file=sys.stderr)
        return 2
    # Detach: the adapter waits for this parent only; the child is re-parented to init and is
    # not a session leader, so it can never acquire a controlling terminal.
    if os.fork() > 0:
        os._exit(0)
    return Runner(Path(args[0])).run()


if __name__ == "__main__":
    sys.exit(main())
