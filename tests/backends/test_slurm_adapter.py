"""The Slurm adapter against a scripted Slurm (``FakeRunner``): which commands it runs, how
often, and in which order. The contract suite runs it against a real cluster."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpupool.backends.base import (
    AdapterContext,
    Capability,
    JobHandle,
    JobSpec,
    PosixIdentity,
    RunState,
)
from gpupool.backends.errors import BackendMisconfigured, BackendRejected, BackendUnavailable
from gpupool.backends.slurm.adapter import SlurmBackend
from gpupool.backends.slurm.commands import FakeRunner, Result, result

POOL = "pool-t4"
DATA = Path(__file__).parent / "testdata" / "slurm"


@dataclass
class Job:
    job_id: str
    name: str
    state: str = "PENDING"
    exit_status: int = 0


@dataclass
class FakeSlurm:
    """Just enough of sbatch, squeue and scancel, on a :class:`FakeRunner`."""

    runner: FakeRunner = field(default_factory=FakeRunner)
    jobs: list[Job] = field(default_factory=list)
    sbatch_stderr: str = ""

    def __post_init__(self) -> None:
        self.runner.handlers.update(sbatch=self._sbatch, squeue=self._squeue)

    def _sbatch(self, argv: Sequence[str], script: str | None) -> Result:
        if self.sbatch_stderr:
            return result(argv, stderr=self.sbatch_stderr, returncode=1)
        name = re.search(r"^#SBATCH --job-name=(\S+)$", script or "", re.M)
        assert name is not None
        job = Job(str(100 + len(self.jobs)), name.group(1))
        self.jobs.append(job)
        return result(argv, stdout=f"{job.job_id}\n")

    def _squeue(self, argv: Sequence[str], _input: str | None) -> Result:
        names = next(a for a in argv if a.startswith("--name=")).removeprefix("--name=")
        wanted = set(names.split(","))
        lines = [
            f"{j.job_id}|{j.state}|None|{j.exit_status}|{j.name}|"
            for j in self.jobs
            if j.name in wanted
        ]
        return result(argv, stdout="".join(f"{line}\n" for line in lines))

    def calls(self, program: str) -> list[list[str]]:
        return [argv for argv, _ in self.runner.calls if argv[0] == program]


@dataclass
class Timers:
    """A scheduler that runs nothing until told to."""

    pending: list[tuple[float, Callable[[], None]]] = field(default_factory=list)

    def __call__(self, delay_s: float, callback: Callable[[], None]) -> None:
        self.pending.append((delay_s, callback))

    def fire(self) -> None:
        for _, callback in self.pending:
            callback()
        self.pending.clear()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Env:
    tmp_path: Path
    slurm: FakeSlurm = field(default_factory=FakeSlurm)
    timers: Timers = field(default_factory=Timers)
    clock: Clock = field(default_factory=Clock)
    options: dict[str, Any] = field(default_factory=lambda: {"partition": "t4"})

    def backend(self) -> SlurmBackend:
        ctx = AdapterContext(
            pool=POOL, gpu_type="t4", options=self.options, state_dir=self.tmp_path
        )
        return SlurmBackend(ctx, runner=self.slurm.runner, clock=self.clock, schedule=self.timers)


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def spec_of(job_id: str = "j", **overrides: Any) -> JobSpec:
    values: dict[str, Any] = {
        "job_id": job_id,
        "attempt": 1,
        "team": "team-a",
        "user": "alice",
        "command": ("python", "-c", "print(1)"),
        "pool": POOL,
        "gpu_type": "t4",
        "gpus_per_node": 1,
        **overrides,
    }
    return JobSpec(**values)


# -- submit ----------------------------------------------------------------------------------


def test_submit_looks_up_the_key_then_submits_the_rendered_script(env: Env) -> None:
    backend = env.backend()

    handle = backend.submit(spec_of(env={"CUDA_VISIBLE_DEVICES": "7", "MINE": "x"}))

    assert env.slurm.runner.programs() == ["squeue", "sbatch"]
    (squeue,) = env.slurm.calls("squeue")
    assert "--name=gpupool-j.1" in squeue and "--states=all" in squeue
    (sbatch, script) = env.slurm.runner.calls[1]
    assert sbatch[:2] == ["sbatch", "--parsable"]
    assert script is not None and "#SBATCH --gres=gpu:t4:1" in script
    assert "export MINE=x" in script
    assert "CUDA_VISIBLE_DEVICES=7" not in script  # Slurm's own wins over the user's
    attempt = env.tmp_path / "slurm" / POOL / "j.1"
    assert handle == JobHandle(
        "slurm", POOL, "100", "j.1", {"workdir": str(attempt), "job_name": "gpupool-j.1"}
    )
    assert json.loads((attempt / "submitted.json").read_text())["job_id"] == "100"
    assert all((attempt / d).is_dir() for d in ("work", "inputs", "outputs"))


def test_resubmitting_reads_the_record_and_runs_nothing(env: Env) -> None:
    first = env.backend().submit(spec_of())
    before = len(env.slurm.runner.calls)

    again = env.backend().submit(spec_of())  # a new instance: a restarted control plane

    assert again == first
    assert len(env.slurm.runner.calls) == before


def test_a_job_submitted_before_a_crash_is_found_by_name(env: Env) -> None:
    # sbatch succeeded, then the process died before it wrote submitted.json.
    env.slurm.jobs += [Job("57", "gpupool-j.1", "RUNNING"), Job("58", "gpupool-j.1")]
    (env.tmp_path / "slurm" / POOL / "j.1").mkdir(parents=True)

    handle = env.backend().submit(spec_of())

    assert handle.provider_id == "57"  # the first of the key's jobs
    assert env.slurm.calls("sbatch") == []


def test_a_job_slurm_purged_is_found_by_the_id_it_wrote(env: Env) -> None:
    attempt = env.tmp_path / "slurm" / POOL / "j.1"
    attempt.mkdir(parents=True)
    (attempt / "slurm_job_id").write_text("33\n")

    handle = env.backend().submit(spec_of())

    assert handle.provider_id == "33"
    assert env.slurm.calls("sbatch") == []


def test_submit_as_the_user_when_root(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.geteuid", lambda: 0)
    chowned: list[tuple[str, int, int]] = []
    monkeypatch.setattr("os.chown", lambda p, u, g: chowned.append((Path(p).name, u, g)))
    backend = env.backend()

    backend.submit(spec_of(posix=PosixIdentity(10001, 20001)))

    (sbatch,) = env.slurm.calls("sbatch")
    assert sbatch[2:] == ["--uid=10001", "--gid=20001"]
    assert Capability.POSIX_IDENTITY in backend.capabilities
    owned = {name for name, uid, gid in chowned if (uid, gid) == (10001, 20001)}
    assert owned == {"work", "inputs", "outputs", "output.log", "exit_code", "slurm_job_id"}


def test_a_refused_submission_is_rejected_and_can_be_retried(env: Env) -> None:
    env.slurm.sbatch_stderr = (
        "sbatch: error: Batch job submission failed: Requested node configuration is not available"
    )
    backend = env.backend()
    with pytest.raises(BackendRejected, match="node configuration"):
        backend.submit(spec_of())

    env.slurm.sbatch_stderr = ""
    assert backend.submit(spec_of()).provider_id == "100"


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        pytest.param({"pool": "other"}, "pool", id="another pool's job"),
        pytest.param(
            {"image": "pytorch:2"}, "runs no images", id="an image on a pool without a runtime"
        ),
        pytest.param({"command": ()}, "no command", id="no command"),
        pytest.param({"env": {"A-B": "1"}}, "not valid in a shell", id="a bad variable name"),
        pytest.param({"max_runtime_s": 0}, "positive", id="zero max runtime"),
    ],
)
def test_invalid_specs_are_rejected_before_slurm_is_asked(
    env: Env, overrides: dict[str, Any], match: str
) -> None:
    with pytest.raises(BackendRejected, match=match):
        env.backend().submit(spec_of(**overrides))
    assert env.slurm.runner.calls == []


# -- poll --------------------------------------------------------------------------------------


def test_poll_asks_squeue_once_for_all_handles(env: Env) -> None:
    backend = env.backend()
    handles = [backend.submit(spec_of(f"j{i}")) for i in range(5)]
    env.slurm.jobs[0].state = "RUNNING"
    env.slurm.jobs[1].state, env.slurm.jobs[1].exit_status = "FAILED", 3 << 8
    env.slurm.jobs[2].state = "COMPLETED"
    del env.slurm.jobs[3:]  # purged: j3 left an exit file, j4 nothing
    (Path(handles[3].data["workdir"]) / "exit_code").write_text("exit_code=0 reason=exited\n")
    env.slurm.runner.calls.clear()

    statuses = backend.poll(handles)

    assert env.slurm.runner.programs() == ["squeue"]
    assert [statuses[h.key].state for h in handles] == [
        RunState.RUNNING,
        RunState.FAILED,
        RunState.SUCCEEDED,
        RunState.SUCCEEDED,
        RunState.LOST,
    ]
    assert statuses["j1.1"].exit_code == 3


def test_an_unparsable_squeue_is_unavailable_not_lost(env: Env) -> None:
    backend = env.backend()
    handle = backend.submit(spec_of())
    env.slurm.runner.on("squeue", stdout="JOBID PARTITION NAME\n")
    with pytest.raises(BackendUnavailable):
        backend.poll([handle])


# -- cancel ------------------------------------------------------------------------------------


def submitted_running(env: Env) -> tuple[SlurmBackend, JobHandle]:
    backend = env.backend()
    handle = backend.submit(spec_of())
    env.slurm.jobs[0].state = "RUNNING"
    env.slurm.runner.calls.clear()
    return backend, handle


def test_cancel_sends_sigterm_now_and_sigkill_after_the_grace(env: Env) -> None:
    backend, handle = submitted_running(env)

    backend.cancel(handle, grace_s=5)
    backend.cancel(handle, grace_s=5)  # idempotent: nothing more is sent

    assert env.slurm.calls("scancel") == [["scancel", "--full", "--signal=TERM", "100"]]
    assert [delay for delay, _ in env.timers.pending] == [5]
    env.timers.fire()
    assert env.slurm.calls("scancel")[-1] == ["scancel", "--full", "--signal=KILL", "100"]
    env.slurm.jobs[0].state, env.slurm.jobs[0].exit_status = "FAILED", 143 << 8
    assert backend.poll([handle])[handle.key].state == RunState.CANCELLED


def test_a_restarted_adapter_kills_an_overdue_cancel_on_poll(env: Env) -> None:
    backend, handle = submitted_running(env)
    backend.cancel(handle, grace_s=5)
    env.timers.pending.clear()  # the process died with its timer

    restarted = env.backend()
    restarted.poll([handle])
    assert len(env.slurm.calls("scancel")) == 1  # not due yet
    env.clock.now += 6
    restarted.poll([handle])
    restarted.poll([handle])

    kills = [c for c in env.slurm.calls("scancel") if "--signal=KILL" in c]
    assert kills == [["scancel", "--full", "--signal=KILL", "100"]]


def test_cancel_with_no_grace_kills_at_once(env: Env) -> None:
    backend, handle = submitted_running(env)
    backend.cancel(handle, grace_s=0)
    assert env.slurm.calls("scancel") == [["scancel", "--full", "--signal=KILL", "100"]]
    assert env.timers.pending == []


def test_cancel_of_a_pending_job_removes_it_from_the_queue(env: Env) -> None:
    backend = env.backend()
    handle = backend.submit(spec_of())
    backend.cancel(handle, grace_s=5)
    assert env.slurm.calls("scancel") == [["scancel", "100"]]


@pytest.mark.parametrize(
    ("state", "want"),
    [
        ("COMPLETED", RunState.SUCCEEDED),
        ("FAILED", RunState.FAILED),
        ("CANCELLED", RunState.CANCELLED),
    ],
)
def test_cancel_of_an_ended_job_changes_nothing(env: Env, state: str, want: RunState) -> None:
    backend, handle = submitted_running(env)
    env.slurm.jobs[0].state = state
    backend.cancel(handle, grace_s=5)
    assert env.slurm.calls("scancel") == []
    assert backend.poll([handle])[handle.key].state == want


# -- logs, capacity, options -------------------------------------------------------------------


def test_logs_read_the_output_file_from_an_offset(env: Env) -> None:
    backend = env.backend()
    handle = backend.submit(spec_of())
    Path(handle.data["workdir"], "output.log").write_bytes(b"hello\nworld\n")
    env.slurm.jobs[0].state = "RUNNING"

    chunk = backend.logs(handle, 6)
    assert (chunk.data, chunk.next_offset, chunk.complete) == (b"world\n", 12, False)
    env.slurm.jobs[0].state = "COMPLETED"
    assert backend.logs(handle, 12).complete


def test_capacity_from_sinfo(env: Env) -> None:
    env.slurm.runner.on("sinfo", stdout=(DATA / "sinfo_all_partitions.txt").read_text())
    capacity = env.backend().capacity()
    (sinfo,) = env.slurm.calls("sinfo")
    assert "--partition=t4" in sinfo
    assert (capacity.usable_nodes, capacity.gpus, capacity.gpus_free) == (2, 4, 4)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        pytest.param({}, "needs options.partition", id="no partition"),
        pytest.param({"partition": "t4", "partiton": "x"}, "unknown slurm pool options: partiton",
                     id="a typo"),
        pytest.param({"partition": "t4; rm -rf /"}, "not a name", id="shell in a name"),
        pytest.param({"partition": "t4", "workdir_root": "/a b"}, "without spaces",
                     id="a path with a space"),
        pytest.param({"partition": "t4", "command_timeout_s": "soon"}, "invalid",
                     id="a timeout that is not a number"),
    ],
)  # fmt: skip
def test_invalid_options_are_misconfigured(env: Env, options: dict[str, Any], match: str) -> None:
    env.options = options
    with pytest.raises(BackendMisconfigured, match=match):
        env.backend()


def test_the_registry_loads_the_adapter(tmp_path: Path) -> None:
    from gpupool.backends.registry import load_factory

    factory = load_factory("slurm")
    ctx = AdapterContext(pool=POOL, gpu_type="t4", options={"partition": "t4"}, state_dir=tmp_path)
    backend = factory(ctx)
    assert backend.name == "slurm"
    assert {Capability.GANG, Capability.LOG_STREAM, Capability.CAPACITY} <= backend.capabilities
