"""Render the sbatch batch script of one attempt (pure; golden-tested).

Everything Slurm needs is in ``#SBATCH`` lines, so the script is the whole request (and
``scontrol write batch_script`` shows it). The body:

1. records ``$SLURM_JOB_ID`` in the attempt dir (a submit that died before bookkeeping can
   still find its job);
2. exports the contract environment (docs/architecture.md §6), values quoted with
:func:`shlex.quote`.
   ``CUDA_VISIBLE_DEVICES`` is Slurm's own, derived from the job's gres allocation (the user's
   ``env`` cannot override it); a job without GPUs gets it empty;
3. runs the command: directly on one node, with ``srun`` (one task per node) for a gang, and
   under ``timeout(1)`` when ``max_runtime_s`` is set, because Slurm's ``--time`` only counts
   whole minutes. ``--time`` is still set, rounded up with a minute to spare, as a backstop;
4. writes ``exit_code`` (see :mod:`.attempt`) so the outcome survives Slurm forgetting the job.

Invariants: every value that reaches the shell is quoted; ``--no-requeue``, because a job Slurm
requeued would run a second time under the same key (gpupool retries with a new attempt).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from gpupool.backends.base import JobSpec
from gpupool.backends.slurm.container import (
    EOF_MARK,
    LAUNCHER,
    ContainerScript,
    launcher,
    pyxis_flags,
)

TIMEOUT_EXIT_CODES = (124, 137)  # timeout(1): timed out; killed after --kill-after


@dataclass(frozen=True)
class ScriptOptions:
    job_name: str
    partition: str
    gres_type: str
    attempt_dir: str
    account: str | None = None
    qos: str | None = None
    max_runtime_grace_s: float = 10.0
    container: ContainerScript | None = None  # the job's image and how to run it


def time_limit_minutes(max_runtime_s: int, grace_s: float) -> int:
    """Slurm's backstop limit: whole minutes covering the runtime and its grace, plus one."""
    return math.ceil((max_runtime_s + grace_s) / 60) + 1


def render_batch_script(spec: JobSpec, env: Mapping[str, str], opts: ScriptOptions) -> str:
    d = opts.attempt_dir
    directives = [
        f"--job-name={opts.job_name}",
        f"--comment=gpupool-key={spec.key}",
        f"--partition={opts.partition}",
        *([f"--account={opts.account}"] if opts.account else []),
        *([f"--qos={opts.qos}"] if opts.qos else []),
        f"--nodes={spec.nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={max(1, math.ceil(spec.cpus))}",
        f"--mem={max(1, math.ceil(spec.memory_gb * 1024))}M",
        *([f"--gres=gpu:{opts.gres_type}:{spec.gpus_per_node}"] if spec.gpus_per_node else []),
        *(
            [f"--time={time_limit_minutes(spec.max_runtime_s, opts.max_runtime_grace_s)}"]
            if spec.max_runtime_s
            else []
        ),
        f"--output={d}/output.log",
        "--open-mode=append",
        f"--chdir={d}/work",
        "--export=NONE",
        "--no-requeue",
    ]
    lines = [
        "#!/bin/bash",
        f"# gpupool attempt {spec.key}, rendered by gpupool.backends.slurm.script: do not edit.",
        *(f"#SBATCH {flag}" for flag in directives),
        "",
        f"printf '%s\\n' \"$SLURM_JOB_ID\" > {shlex.quote(d + '/slurm_job_id')}",
        "",
        "# --export=NONE gives no HOME: the user's home on this node, else the work dir.",
        'HOME=$(getent passwd "$(id -u)" | cut -d: -f6)',
        f'[ -n "$HOME" ] && [ -d "$HOME" ] || HOME={shlex.quote(d + "/work")}',
        "export HOME",
        *(f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())),
    ]
    if not spec.gpus_per_node:
        lines.append("export CUDA_VISIBLE_DEVICES=")
    if opts.container is not None and opts.container.runtime != "pyxis":
        lines += [
            "",
            f"# Runs the command in {opts.container.image} on each node (gpupool.backends.slurm."
            "container).",
            f"cat > {shlex.quote(d + '/' + LAUNCHER)} <<'{EOF_MARK}'",
            *launcher(spec, opts.container),
            EOF_MARK,
        ]
    lines += [
        "",
        "# A trap handler (unlike an ignored signal) is reset when the command is exec'd: the",
        "# command still gets SIGTERM, and this shell lives on to record how it ended.",
        "trap : TERM",
        _command_line(spec, opts),
        "rc=$?",
        *_container_cleanup(opts.container),
        "reason=exited",
    ]
    if spec.max_runtime_s:
        codes = " || ".join(f'[ "$rc" -eq {c} ]' for c in TIMEOUT_EXIT_CODES)
        lines.append(f'if {{ {codes}; }} && [ "$SECONDS" -ge {spec.max_runtime_s} ]; then')
        lines.append("    reason=max_runtime")
        lines.append("fi")
    limit = f" max_runtime_s={spec.max_runtime_s}" if spec.max_runtime_s else ""
    lines += [
        f'printf \'exit_code=%d reason=%s{limit}\\n\' "$rc" "$reason"'
        f" > {shlex.quote(d + '/exit_code')}",
        'exit "$rc"',
        "",
    ]
    return "\n".join(lines)


def _container_cleanup(container: ContainerScript | None) -> list[str]:
    """A launcher killed after its grace leaves its container to the runtime: remove it here
    (this node's; the runtime's client on other nodes of a gang removes theirs)."""
    if container is None or container.runtime != "podman":
        return []
    binary = shlex.quote(container.binary or "podman")
    name = f'"{container.name}-$SLURM_NODEID"'
    return [f"{binary} rm -f {name} >/dev/null 2>&1 || true"]


def _command_line(spec: JobSpec, opts: ScriptOptions) -> str:
    argv = list(spec.command)
    container = opts.container
    if container is not None and container.runtime == "pyxis":
        # pyxis runs containers for job steps only: srun even on one node.
        argv = [
            "srun",
            "--export=ALL",
            f"--nodes={spec.nodes}",
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=1",
            *pyxis_flags(container),
            *argv,
        ]
    elif container is not None:
        argv = ["/bin/bash", f"{opts.attempt_dir}/{LAUNCHER}"]
    if spec.nodes > 1 and not (container is not None and container.runtime == "pyxis"):
        # --export=NONE on sbatch sets SLURM_EXPORT_ENV=NONE, which srun would obey too.
        argv = [
            "srun",
            "--export=ALL",
            f"--nodes={spec.nodes}",
            "--ntasks-per-node=1",
            "--kill-on-bad-exit=1",
            *argv,
        ]
    if spec.max_runtime_s:
        argv = [
            "timeout",
            "--signal=TERM",
            f"--kill-after={opts.max_runtime_grace_s:g}s",
            f"{spec.max_runtime_s}s",
            *argv,
        ]
    return shlex.join(argv)
