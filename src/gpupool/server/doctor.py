"""``gpupool doctor``: check what a server depends on and say what to fix.

Four areas, each a list of :class:`Finding` (``ok``, ``warn`` or ``fail``, with the fix):

* **database**: reachable; schema at this release's revision (``state.schema``); on
  PostgreSQL, which controller holds the lease (none, or an expired one, warns: nothing is
  scheduled until a controller runs);
* **clock**: this machine's clock against the PostgreSQL server's (leases, token expiry and
  grant deadlines compare times written by different machines); more than
  :data:`MAX_SKEW_S` apart fails;
* **backends**: each pool's adapter loads and its system answers a cheap question (Slurm:
  ``sinfo`` through the adapter's capacity report; Ray: one job listing; local: the job
  runner starts with this Python);
* **storage**: ``GPUPOOL_HOME`` and its private files have the modes the server gives them
  (``server.runtime.private_home``, ``state.db``), and each team's local storage tree exists
  with the owners and modes of ``data.storage``.

Doctor reads and probes; it changes nothing (it creates no store, directory or job) so it can
run beside a live server, as the server's user or as root.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from gpupool.backends.errors import BackendError
from gpupool.backends.registry import Registry
from gpupool.config import Settings
from gpupool.controller.probes import ask
from gpupool.data import storage
from gpupool.data.grants.local import KEY_FILE
from gpupool.data.roots import LocalRoot, team_root
from gpupool.server.runtime import pool_bindings
from gpupool.spec.models import ClusterConfig
from gpupool.state.db import SQLITE_SIDE_FILES
from gpupool.state.health import StoreReport
from gpupool.state.schema import UPGRADE_COMMAND, SchemaVerdict

MAX_SKEW_S = 2.0
RUNNER_TIMEOUT_S = 20.0


class Verdict(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Finding:
    area: str  # database, clock, backends, storage
    subject: str  # what was checked: "schema", a pool's name, a path
    verdict: Verdict
    detail: str
    fix: str = ""


def failed(findings: list[Finding]) -> bool:
    return any(f.verdict is Verdict.FAIL for f in findings)


# -- database and clock ------------------------------------------------------------------------


def database_findings(store: StoreReport) -> list[Finding]:
    if store.error is not None:
        fix = (
            "check GPUPOOL_DATABASE_URL, that the database server runs and accepts this host "
            "and user (docs/deployment.md, PostgreSQL)"
        )
        return [Finding("database", store.url, Verdict.FAIL, store.error, fix)]
    reached = Finding("database", store.url, Verdict.OK, f"{store.dialect}: reachable")
    schema = store.schema
    assert schema is not None  # reached stores have a schema status
    if schema.verdict is SchemaVerdict.CURRENT:
        return [
            reached,
            Finding("database", "schema", Verdict.OK, schema.message),
            *lease_findings(store),
        ]
    if schema.verdict is SchemaVerdict.FRESH:
        return [reached, Finding("database", "schema", Verdict.WARN, schema.message)]
    fix = (
        f"stop the servers, back up, run `{UPGRADE_COMMAND}`"
        if schema.verdict is SchemaVerdict.OLDER
        else "run the gpupool release that wrote this store, or use another database"
    )
    return [reached, Finding("database", "schema", Verdict.FAIL, schema.message, fix)]


def lease_findings(store: StoreReport) -> list[Finding]:
    """PostgreSQL only (on SQLite the one server process is the controller)."""
    if store.dialect != "postgresql":
        return []
    held = store.lease
    fix = "start a controller: `gpupool server --role controller` (or --role all)"
    if held is None or not held.holder:
        return [Finding("database", "controller lease", Verdict.WARN, "never held", fix)]
    detail = (
        f"{held.holder} (epoch {held.epoch}), renewed {held.age_s:.1f} s ago, "
        f"held for {held.held_for_s:.0f} s"
    )
    if held.expires_in_s <= 0:
        detail = f"expired {-held.expires_in_s:.1f} s ago; last held by {detail}"
        return [Finding("database", "controller lease", Verdict.WARN, detail, fix)]
    return [Finding("database", "controller lease", Verdict.OK, detail)]


def clock_findings(store: StoreReport) -> list[Finding]:
    if store.error is not None:
        return []  # the database finding already fails
    if store.skew_s is None:
        detail = "SQLite: the store has no clock of its own (only this machine's counts)"
        return [Finding("clock", "database", Verdict.OK, detail)]
    skew = f"the database server's clock is {store.skew_s:+.3f} s from this machine's"
    if abs(store.skew_s) > MAX_SKEW_S:
        fix = "synchronise both machines with NTP (chrony or systemd-timesyncd)"
        return [Finding("clock", "database", Verdict.FAIL, f"{skew} (> {MAX_SKEW_S:g} s)", fix)]
    return [Finding("clock", "database", Verdict.OK, skew)]


# -- backends ----------------------------------------------------------------------------------


def runner_starts(python: str = sys.executable) -> str | None:
    """Start the local job runner with no attempt (it prints its usage and exits 2): the
    interpreter and gpupool import. ``None`` when it does; else why not."""
    argv = [python, "-m", "gpupool.backends.local.runner"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RUNNER_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {python}: {exc}"
    if done.returncode == 2 and "usage" in done.stderr:
        return None
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return f"the job runner exited {done.returncode}: {last}"


def _probe(backend: object, pool: str, name: str, runner: Callable[[], str | None]) -> str:
    """Ask the backend's system one cheap question; a description of the answer."""
    if name == "local":
        problem = runner()
        if problem is not None:
            raise BackendError(problem)
        return "the job runner starts"
    # The question the controller's probes ask (controller/probes.py).
    capacity = ask(backend, pool, name)
    if capacity is not None:
        return f"answers: {capacity.nodes} usable node(s), {capacity.gpus_per_node} GPU(s) each"
    if not callable(getattr(backend, "poll", None)):
        return "loaded (no probe for this backend)"
    return "answers a job listing"


def backend_findings(
    config: ClusterConfig,
    settings: Settings,
    registry: Registry | None = None,
    runner: Callable[[], str | None] = runner_starts,
) -> list[Finding]:
    registry = registry or Registry(pool_bindings(config, settings.state_dir))
    findings = []
    try:
        for pool in config.pools:
            subject = f"pool {pool.name} ({pool.backend})"
            try:
                detail = _probe(registry.get(pool.name), pool.name, pool.backend, runner)
            except BackendError as exc:
                fix = (
                    f"check the options of pool {pool.name} and that its "
                    f"{pool.backend} system is up and reachable from this machine"
                )
                findings.append(Finding("backends", subject, Verdict.FAIL, str(exc), fix))
                continue
            findings.append(Finding("backends", subject, Verdict.OK, detail))
    finally:
        registry.close()
    return findings


# -- storage -----------------------------------------------------------------------------------


def _mode_finding(path: Path, forbidden: int, what: str) -> Finding | None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    mode = stat.S_IMODE(info.st_mode)
    if mode & forbidden:
        fix = f"chmod {oct(mode & ~forbidden)[2:]} {path}"
        detail = f"{what} is mode {oct(mode)[2:]}: group or others may read (list) or write it"
        return Finding("storage", str(path), Verdict.FAIL, detail, fix)
    return Finding("storage", str(path), Verdict.OK, f"{what}, mode {oct(mode)[2:]}")


def home_findings(settings: Settings, store_file: Path | None = None) -> list[Finding]:
    """``store_file``: the SQLite store's file as its URL names it (None: not SQLite)."""
    home = settings.home
    if not home.is_dir():
        fix = "start the server once (it creates it), or set GPUPOOL_HOME"
        return [Finding("storage", str(home), Verdict.FAIL, "GPUPOOL_HOME does not exist", fix)]
    checks = [(home, 0o066, "GPUPOOL_HOME"), (settings.state_dir, 0o066, "job state")]
    if settings.grant_key is None:
        checks.append((home / KEY_FILE, 0o077, "the grant key"))
    if store_file is not None:
        checks += [
            (store_file.with_name(store_file.name + s), 0o077, "the store")
            for s in ("", *SQLITE_SIDE_FILES)
        ]
    return [f for p, bits, what in checks if (f := _mode_finding(p, bits, what)) is not None]


@dataclass(frozen=True, slots=True)
class _Expected:
    path: Path
    mode: int
    owner: storage.Owner | None  # None: not checked (gpupool does not run as root)


def _team_tree(
    root: Path, gid: int | None, homes: dict[str, storage.Owner], as_root: bool
) -> Iterator[_Expected]:
    team = storage.Owner(0, gid if gid is not None else 0) if as_root else None
    with_gid = gid is not None
    yield _Expected(root, storage.ROOT_MODE if with_gid else storage.ROOT_MODE_NO_GID, team)
    shared = storage.SHARED_MODE if with_gid else storage.SHARED_MODE_NO_GID
    yield _Expected(storage.shared_dir(root), shared, team)
    homes_mode = storage.HOMES_MODE if with_gid else storage.ROOT_MODE_NO_GID
    yield _Expected(root / storage.HOMES, homes_mode, team)
    for user, owner in sorted(homes.items()):
        yield _Expected(storage.home_dir(root, user), storage.HOME_MODE, owner if as_root else None)


def storage_findings(
    config: ClusterConfig, settings: Settings, as_root: bool | None = None
) -> list[Finding]:
    """Each team's local tree as ``data.storage.ensure_layout`` makes it (owners only when
    the server runs as root: without root it cannot chown, so it does not)."""
    as_root = os.geteuid() == 0 if as_root is None else as_root
    findings = []
    for name, team in sorted(config.teams.items()):
        where = team_root(config.storage, name, settings.home)
        if not isinstance(where, LocalRoot):
            continue  # blob and S3 roots have no directories here
        homes = storage.team_homes(config, name)
        problems = [p for e in _team_tree(where.path, team.gid, homes, as_root) if (p := _wrong(e))]
        subject = f"team {name}: {where.path}"
        if problems:
            fix = "restart the server (it repairs team storage at start) or fix by hand"
            findings.append(Finding("storage", subject, Verdict.FAIL, "; ".join(problems), fix))
        else:
            findings.append(Finding("storage", subject, Verdict.OK, "owners and modes as made"))
    return findings


def _wrong(expected: _Expected) -> str | None:
    try:
        info = expected.path.lstat()
    except FileNotFoundError:
        return f"{expected.path} is missing"
    if not stat.S_ISDIR(info.st_mode):
        return f"{expected.path} is not a directory"
    mode = stat.S_IMODE(info.st_mode)
    if mode != expected.mode:
        return f"{expected.path} is mode {oct(mode)[2:]}, not {oct(expected.mode)[2:]}"
    owner = expected.owner
    if owner is not None and (info.st_uid, info.st_gid) != (owner.uid, owner.gid):
        return (
            f"{expected.path} is owned by {info.st_uid}:{info.st_gid}, not {owner.uid}:{owner.gid}"
        )
    return None


def diagnose(settings: Settings, config: ClusterConfig | None, store: StoreReport) -> list[Finding]:
    """Every finding, in table order; backends and storage need a configuration."""
    findings = (
        database_findings(store) + clock_findings(store) + home_findings(settings, store.file)
    )
    if config is None:
        fix = "pass --config FILE, or fix the database so the stored configuration can be read"
        detail = "no configuration to check the pools and team storage against"
        return [*findings, Finding("backends", "configuration", Verdict.WARN, detail, fix)]
    return findings + backend_findings(config, settings) + storage_findings(config, settings)
