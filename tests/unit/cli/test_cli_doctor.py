"""``gpupool doctor``: each check's verdict and fix (``server.doctor``), and the command's table,
JSON and exit code on a real home (SQLite) and a real PostgreSQL."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from gpupool.backends.registry import Registry
from gpupool.cli.main import app
from gpupool.config import Settings, sqlite_url
from gpupool.server.doctor import (
    Finding,
    Verdict,
    backend_findings,
    clock_findings,
    database_findings,
    home_findings,
    runner_starts,
    storage_findings,
)
from gpupool.server.runtime import pool_bindings, private_home
from gpupool.server.serve import prepare_storage, resolve_config
from gpupool.spec.load import load_config
from gpupool.state import lease
from gpupool.state.db import make_engine, session_factory, upgrade
from gpupool.state.health import StoreReport, inspect_store
from gpupool.state.lease import LeaseView
from gpupool.state.schema import SchemaStatus, SchemaVerdict

runner = CliRunner()


@dataclass(frozen=True)
class StoreCase:
    report: StoreReport
    verdicts: tuple[Verdict, ...]  # database findings (the lease on PostgreSQL), then clock
    fix: str = ""  # in the failing finding's fix


def status(verdict: SchemaVerdict, revision: str | None = "0004") -> SchemaStatus:
    return SchemaStatus(verdict, revision, "0004")


OK, WARN, FAIL = Verdict.OK, Verdict.WARN, Verdict.FAIL
PG = "postgresql"
HELD = LeaseView("ctl", 1, 0.5, 5.0, 60.0)  # renewed 0.5 s ago, held for a minute


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            StoreCase(StoreReport("u", PG, error="OperationalError: refused"), (FAIL,), "URL"),
            id="an unreachable database fails, and the clock is not judged",
        ),
        pytest.param(
            StoreCase(
                StoreReport(
                    "u",
                    PG,
                    schema=status(SchemaVerdict.CURRENT),
                    skew_s=0.4,
                    lease=HELD,
                ),
                (OK, OK, OK, OK),
            ),
            id="current schema and 0.4 s of skew pass",
        ),
        pytest.param(
            StoreCase(
                StoreReport(
                    "u",
                    PG,
                    schema=status(SchemaVerdict.CURRENT),
                    skew_s=-2.5,
                    lease=HELD,
                ),
                (OK, OK, OK, FAIL),
                "NTP",
            ),
            id="2.5 s of skew fails: synchronise the clocks",
        ),
        pytest.param(
            StoreCase(
                StoreReport(
                    "u",
                    PG,
                    schema=status(SchemaVerdict.CURRENT),
                    skew_s=2.0,
                    lease=HELD,
                ),
                (OK, OK, OK, OK),
            ),
            id="exactly 2 s of skew still passes",
        ),
        pytest.param(
            StoreCase(
                StoreReport("u", PG, schema=status(SchemaVerdict.OLDER, "0001")),
                (OK, FAIL, OK),
                "gpupool db upgrade",
            ),
            id="an older schema fails: run gpupool db upgrade",
        ),
        pytest.param(
            StoreCase(
                StoreReport("u", "sqlite", schema=status(SchemaVerdict.FRESH, None)), (OK, WARN, OK)
            ),
            id="an empty store only warns (the server creates it); SQLite has no clock",
        ),
    ],
)
def test_database_and_clock_findings(case: StoreCase) -> None:
    found = database_findings(case.report) + clock_findings(case.report)
    assert tuple(f.verdict for f in found) == case.verdicts
    failing = [f for f in found if f.verdict is FAIL]
    assert all(case.fix in f.fix for f in failing)


# -- storage -----------------------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, demo_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home as a server's first start leaves it: store, configuration, team storage."""
    home = tmp_path / "home"
    monkeypatch.setenv("GPUPOOL_HOME", str(home))
    monkeypatch.delenv("GPUPOOL_DATABASE_URL", raising=False)
    settings = settings_of(home)
    config = resolve_config(settings, demo_path)
    prepare_storage(config, settings)
    private_home(settings.home, settings.state_dir)
    return home


def settings_of(home: Path) -> Settings:
    return Settings(home=home, database_url=sqlite_url(home))


def failures(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.verdict is FAIL]


@dataclass(frozen=True)
class DamageCase:
    path: str  # below the home
    chmod: int | None = None
    chown: tuple[int, int] | None = None
    remove: bool = False
    says: str = ""


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(DamageCase(".", chmod=0o777, says="chmod 711"), id="a world-writable home"),
        pytest.param(
            DamageCase("gpupool.db", chmod=0o644, says="chmod 600"), id="a world-readable store"
        ),
        pytest.param(
            DamageCase("storage/team-a/shared", chmod=0o777, says="not 2770"),
            id="a team's shared area open to all",
        ),
        pytest.param(
            DamageCase("storage/team-b", remove=True, says="missing"), id="a team root removed"
        ),
        pytest.param(
            DamageCase("storage/team-a/home/alice", chown=(4242, 4242), says="owned by 4242"),
            id="a home owned by a stranger (as root)",
        ),
    ],
)
def test_storage_damage_is_found_with_its_fix(
    case: DamageCase, home: Path, demo_path: Path
) -> None:
    if case.chown and os.geteuid() != 0:
        pytest.skip("owners are only checked (and set) when gpupool runs as root: run as root")
    settings, config = settings_of(home), load_config(demo_path)
    store = inspect_store(settings.database_url).file
    before = home_findings(settings, store) + storage_findings(config, settings)
    assert failures(before) == []
    target = home / case.path
    if case.chmod is not None:
        target.chmod(case.chmod)
    if case.chown is not None:
        os.chown(target, *case.chown)
    if case.remove:
        for path in sorted(target.rglob("*"), reverse=True):
            path.rmdir()
        target.rmdir()
    found = failures(home_findings(settings, store) + storage_findings(config, settings))
    assert len(found) == 1
    assert case.says in found[0].detail + found[0].fix


def test_the_store_checked_is_the_one_the_url_names(tmp_path: Path, home: Path) -> None:
    """GPUPOOL_DATABASE_URL may name a SQLite file outside GPUPOOL_HOME: that file's modes are
    checked (on the code before, doctor looked at $GPUPOOL_HOME/gpupool.db only)."""
    elsewhere = tmp_path / "elsewhere"
    engine = make_engine(sqlite_url(elsewhere))
    upgrade(engine)
    engine.dispose()
    settings = Settings(home=home, database_url=sqlite_url(elsewhere))
    report = inspect_store(settings.database_url)
    (elsewhere / "gpupool.db").chmod(0o644)
    found = failures(home_findings(settings, report.file))
    assert [f.subject for f in found] == [str(elsewhere / "gpupool.db")]
    assert "chmod 600" in found[0].fix


# -- backends ----------------------------------------------------------------------------------


def test_local_pools_pass_when_the_runner_starts(home: Path, demo_path: Path) -> None:
    assert runner_starts() is None
    found = backend_findings(load_config(demo_path), settings_of(home))
    assert found and all(f.verdict is OK and "runner starts" in f.detail for f in found)


def test_a_runner_that_cannot_start_fails_every_local_pool(home: Path, demo_path: Path) -> None:
    assert runner_starts(python=str(home / "no-python")) is not None
    found = backend_findings(load_config(demo_path), settings_of(home), runner=lambda: "broken")
    assert found and all(f.verdict is FAIL and f.detail == "broken" for f in found)


@pytest.mark.parametrize(
    ("adapter", "verdict"),
    [
        pytest.param("gpupool.backends.fake:FakeBackend", OK, id="a backend that answers polls"),
        pytest.param("gpupool.no_such_backend:Backend", FAIL, id="a backend that cannot load"),
    ],
)
def test_other_backends_are_loaded_and_polled(
    adapter: str, verdict: Verdict, home: Path, demo_path: Path
) -> None:
    config, settings = load_config(demo_path), settings_of(home)
    # A backend name other than "local" (whose probe is the runner), served by ``adapter``.
    bindings = {
        name: type(b)(backend="other", context=b.context)
        for name, b in pool_bindings(config, settings.state_dir).items()
    }
    registry = Registry(bindings, adapters={"other": adapter})
    found = backend_findings(config, settings, registry=registry)
    assert [f.verdict for f in found] == [verdict] * len(config.pools)


# -- the command ------------------------------------------------------------------------------


def test_doctor_on_a_healthy_home_prints_the_table_and_exits_0(home: Path) -> None:
    done = runner.invoke(app, ["doctor"])  # the stored configuration
    assert done.exit_code == 0, done.output
    for expected in ("schema current", "runner starts", "team team-a", "ok"):
        assert expected in done.output


def test_doctor_exits_5_and_says_what_to_fix(home: Path) -> None:
    home.chmod(0o777)
    done = runner.invoke(app, ["doctor", "--json"])
    assert done.exit_code == 5
    failing = [f for f in json.loads(done.output)["items"] if f["verdict"] == "fail"]
    assert [f["fix"] for f in failing] == [f"chmod 711 {home}"]


def test_doctor_without_a_store_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPOOL_HOME", str(tmp_path / "nothing"))
    monkeypatch.delenv("GPUPOOL_DATABASE_URL", raising=False)
    done = runner.invoke(app, ["doctor", "--json"])
    assert done.exit_code == 5
    assert not (tmp_path / "nothing").exists()  # doctor creates nothing
    details = {f["subject"]: f["detail"] for f in json.loads(done.output)["items"]}
    assert any("no store at" in d for d in details.values())


# -- PostgreSQL --------------------------------------------------------------------------------


@pytest.fixture
def pg_store(postgres_url: str) -> str:
    engine = make_engine(postgres_url)
    with engine.begin() as connection:
        connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    return postgres_url


@pytest.mark.parametrize(
    ("offset_s", "verdict"),
    [
        pytest.param(0.0, OK, id="the same clock passes"),
        pytest.param(-5.0, FAIL, id="this machine 5 s behind the database fails"),
    ],
)
def test_clock_skew_against_postgresql(pg_store: str, offset_s: float, verdict: Verdict) -> None:
    report = inspect_store(pg_store, now=lambda: time.time() + offset_s)
    assert report.error is None and report.skew_s is not None
    assert abs(report.skew_s + offset_s) < 1.0  # measured, not assumed
    assert [f.verdict for f in clock_findings(report)] == [verdict]


def test_the_controller_lease_is_reported(pg_store: str) -> None:
    engine = make_engine(pg_store)
    upgrade(engine)
    sessions = session_factory(engine)

    def lease_finding() -> Finding:
        found = [f for f in database_findings(inspect_store(pg_store)) if "lease" in f.subject]
        assert len(found) == 1
        return found[0]

    nobody = lease_finding()
    assert nobody.verdict is WARN and "--role controller" in nobody.fix
    with sessions.begin() as session:
        lease.campaign(session, "ctl-1", 0, 30.0)
    held = lease_finding()
    assert held.verdict is OK and "ctl-1 (epoch 1)" in held.detail
    with sessions.begin() as session:
        lease.release(session, "ctl-1", 1)
    gone = lease_finding()
    engine.dispose()
    assert gone.verdict is WARN and gone.detail.startswith("expired")


def test_unreachable_postgresql_is_reported_without_the_password() -> None:
    report = inspect_store("postgresql+psycopg://gp:s3cret@127.0.0.1:1/gpupool")
    assert report.error is not None
    assert "s3cret" not in report.url + report.error
    assert database_findings(report)[0].verdict is FAIL
