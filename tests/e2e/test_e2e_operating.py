"""Operating gpupool with real processes (docs/deployment.md): a server refuses an older
store and names ``gpupool db upgrade``; after the upgrade it serves HTTPS with its own
certificate; ``db upgrade`` and ``doctor`` work on a real PostgreSQL."""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import os
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from alembic import command
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from sqlalchemy import text

from gpupool.config import Settings
from gpupool.server.runtime import private_home
from gpupool.server.serve import prepare_storage
from gpupool.spec.load import load_config
from gpupool.state.db import alembic_config, make_engine
from support.server import free_port

pytestmark = pytest.mark.slow


def gpupool(
    *args: str, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpupool", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=timeout,
    )


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 that is its own CA, and its key (PEM, key 0600)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpupool test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    certfile, keyfile = directory / "server.crt", directory / "server.key"
    certfile.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    keyfile.touch(mode=0o600)
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return certfile, keyfile


def migrate_to(url: str, revision: str) -> None:
    engine = make_engine(url)
    cfg = alembic_config(engine)
    with engine.begin() as connection:
        cfg.attributes["connection"] = connection
        command.upgrade(cfg, revision)
    engine.dispose()


def test_old_store_is_refused_upgraded_then_served_over_https(
    tmp_path: Path, demo_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUPOOL_DATABASE_URL", raising=False)  # the home's SQLite store
    home = tmp_path / "home"
    env = {"GPUPOOL_HOME": str(home)}
    migrate_to(f"sqlite:///{home / 'gpupool.db'}", "0001")  # as an old release left it

    port = free_port()
    serve = ["server", "--config", str(demo_path), "--port", str(port)]
    refused = gpupool(*serve, env=env)
    assert refused.returncode == 5, refused.stdout + refused.stderr
    assert "gpupool db upgrade" in refused.stderr

    upgraded = gpupool("db", "upgrade", env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert "from revision 0001 to" in upgraded.stdout

    certfile, keyfile = self_signed(tmp_path)
    tls = ["--ssl-certfile", str(certfile), "--ssl-keyfile", str(keyfile)]
    log = tmp_path / "server.log"
    with log.open("w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "gpupool", *serve, *tls],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
    trust = ssl.create_default_context(cafile=str(certfile))
    url = f"https://127.0.0.1:{port}"
    try:
        deadline, answer = time.monotonic() + 30, None
        while answer is None and time.monotonic() < deadline:
            assert server.poll() is None, log.read_text()
            try:
                answer = httpx.get(f"{url}/healthz", verify=trust, timeout=2)
            except httpx.TransportError:
                time.sleep(0.1)
        assert answer is not None and answer.status_code == 200, log.read_text()
        assert f"listening on {url}" in log.read_text()
        with pytest.raises(httpx.TransportError):  # plain HTTP is not served beside it
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
        with pytest.raises(httpx.ConnectError):  # and an untrusted certificate is caught
            httpx.get(f"{url}/healthz", timeout=2)
    finally:
        server.terminate()
        server.wait(15)


def test_db_upgrade_and_doctor_on_postgresql(
    postgres_url: str, tmp_path: Path, demo_path: Path
) -> None:
    engine = make_engine(postgres_url)
    with engine.begin() as connection:  # an empty database, as an operator creates it
        connection.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
    engine.dispose()
    home = tmp_path / "home"
    env = {"GPUPOOL_HOME": str(home), "GPUPOOL_DATABASE_URL": postgres_url}

    upgraded = gpupool("db", "upgrade", env=env)
    assert upgraded.returncode == 0, upgraded.stderr
    assert "from revision (empty) to" in upgraded.stdout

    settings = Settings(home=home, database_url=postgres_url)
    prepare_storage(load_config(demo_path), settings)  # what a server's start leaves behind
    private_home(settings.home, settings.state_dir)
    done = gpupool("doctor", "--config", str(demo_path), "--json", env=env)
    findings = json.loads(done.stdout)["items"]
    assert done.returncode == 0, findings
    by_area = {(f["area"], f["subject"]): f for f in findings}
    assert by_area[("database", "schema")]["detail"].startswith("schema current")
    clock = by_area[("clock", "database")]
    assert clock["verdict"] == "ok" and "database server's clock is" in clock["detail"]
    assert sum(f["area"] == "backends" for f in findings) == len(load_config(demo_path).pools)
