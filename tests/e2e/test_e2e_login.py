"""`gpupool login` against a real identity provider (scripts/oidc/up.sh) and a real server: the
CLI runs the device flow while the test, as the user in a browser would, opens the page the CLI
showed, signs in and approves or denies. Afterwards commands work with no token given, renew
the token through the refresh token when it has expired, and `gpupool logout` forgets it."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.oidc_provider import Provider, start_provider
from support.server import ServerProcess

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"
CLIENT = "gpupool-cli"
EXPIRING = "gpupool-cli-expiring"  # a client whose codes expire at once
PROMPT = re.compile(r"enter the code (\S+)")
COMPLETE = re.compile(r"\(or open (\S+)\)")


@pytest.fixture(scope="module")
def provider() -> Provider:
    found = start_provider()
    found.set_users("dave", groups=["TeamA"])
    found.set_clients(
        {CLIENT: {"interval": 1, "expires_in": 60}, EXPIRING: {"interval": 1, "expires_in": 2}}
    )
    return found


@pytest.fixture(scope="module")
def server(provider: Provider) -> Iterator[ServerProcess]:
    base = Path(tempfile.mkdtemp(prefix="gpupool-login-"))
    base.chmod(0o755)  # jobs run as the demo's uids when the tests run as root
    env = {
        "GPUPOOL_OIDC_ISSUER": provider.issuer,
        "GPUPOOL_OIDC_AUDIENCE": "gpupool",
        "GPUPOOL_OIDC_CLIENT_ID": CLIENT,
    }
    process = ServerProcess(base / "home", DEMO, env=env)
    try:
        process.start(timeout=60)
        yield process
    finally:
        process.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def config_home(tmp_path: Path) -> Path:
    return tmp_path / "config"


def cli_env(config_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GPUPOOL_TOKEN", "GPUPOOL_URL")}
    return {**env, "XDG_CONFIG_HOME": str(config_home), "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}


def gpupool(
    server: ServerProcess, config_home: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "gpupool", "--url", server.url, *args]
    return subprocess.run(
        command, capture_output=True, text=True, env=cli_env(config_home), timeout=60
    )


class Login:
    """`gpupool login` running in the background, read as the user reads it."""

    def __init__(self, server: ServerProcess, config_home: Path, *args: str) -> None:
        command = [sys.executable, "-m", "gpupool", "--url", server.url, "login", *args]
        self.proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(config_home),
        )
        self.shown: list[str] = []

    def prompt(self) -> tuple[str, str]:
        """The user code and the verification page with it, as the CLI showed them."""
        assert self.proc.stdout is not None
        code = None
        while (line := self.proc.stdout.readline()) != "":
            self.shown.append(line)
            if match := PROMPT.search(line):
                code = match.group(1)
            if match := COMPLETE.search(line):
                assert code is not None
                return code, match.group(1)
        raise AssertionError(f"login showed no code: {self.shown} {self.finish()}")

    def finish(self) -> tuple[int, str, str]:
        out, err = self.proc.communicate(timeout=60)
        return self.proc.returncode, "".join(self.shown) + out, err


def credentials_path(config_home: Path) -> Path:
    return config_home / "gpupool" / "credentials.json"


def stored(config_home: Path, server: ServerProcess) -> dict[str, object]:
    entry: dict[str, object] = json.loads(credentials_path(config_home).read_text())["servers"][
        server.url
    ]
    return entry


def sign_in(server: ServerProcess, provider: Provider, config_home: Path) -> tuple[int, str, str]:
    login = Login(server, config_home)
    code, page = login.prompt()
    assert code in page
    answer = provider.answer(page, "dave", "approve")
    assert answer.status_code == 200, answer.text
    return login.finish()


def test_login_then_commands_need_no_token(
    server: ServerProcess, provider: Provider, config_home: Path
) -> None:
    rc, out, err = sign_in(server, provider, config_home)
    assert rc == 0, err
    assert f"Signed in to {server.url} as dave" in out
    path = credentials_path(config_home)
    modes = (stat.S_IMODE(path.stat().st_mode), stat.S_IMODE(path.parent.stat().st_mode))
    assert modes == (0o600, 0o700)
    entry = stored(config_home, server)
    assert entry["issuer"] == provider.issuer and entry["client_id"] == CLIENT
    assert entry["refresh_token"], "the provider issues a refresh token with the device grant"
    for secret in (entry["access_token"], entry["refresh_token"]):
        assert str(secret) not in out + err

    whoami = gpupool(server, config_home, "whoami", "--json")
    assert whoami.returncode == 0, whoami.stderr
    assert json.loads(whoami.stdout)["user"] == "dave"
    assert json.loads(whoami.stdout)["teams"] == {"team-a": "member"}


def test_an_expired_sign_in_is_renewed_with_the_refresh_token(
    server: ServerProcess, provider: Provider, config_home: Path
) -> None:
    assert sign_in(server, provider, config_home)[0] == 0
    before = stored(config_home, server)
    document = json.loads(credentials_path(config_home).read_text())
    document["servers"][server.url]["expires_at"] = 0  # long expired
    credentials_path(config_home).write_text(json.dumps(document))

    whoami = gpupool(server, config_home, "whoami", "--json")
    assert whoami.returncode == 0, whoami.stderr
    assert json.loads(whoami.stdout)["user"] == "dave"
    after = stored(config_home, server)
    assert after["access_token"] != before["access_token"]
    assert after["refresh_token"] != before["refresh_token"]  # rotated by the provider
    assert float(str(after["expires_at"])) > 0


def test_an_expired_sign_in_without_a_refresh_token_says_to_sign_in_again(
    server: ServerProcess, provider: Provider, config_home: Path
) -> None:
    assert sign_in(server, provider, config_home)[0] == 0
    document = json.loads(credentials_path(config_home).read_text())
    document["servers"][server.url].update(expires_at=0, refresh_token=None)
    credentials_path(config_home).write_text(json.dumps(document))

    whoami = gpupool(server, config_home, "whoami")
    assert whoami.returncode == 4
    assert "has expired" in whoami.stderr and "run `gpupool login` again" in whoami.stderr


def test_logout_forgets_the_sign_in(
    server: ServerProcess, provider: Provider, config_home: Path
) -> None:
    assert sign_in(server, provider, config_home)[0] == 0
    logout = gpupool(server, config_home, "logout")
    assert logout.returncode == 0 and f"Signed out of {server.url}" in logout.stdout
    assert not credentials_path(config_home).exists()
    whoami = gpupool(server, config_home, "whoami")
    assert whoami.returncode == 4 and "missing bearer token" in whoami.stderr


def test_a_denied_sign_in_fails_and_stores_nothing(
    server: ServerProcess, provider: Provider, config_home: Path
) -> None:
    login = Login(server, config_home)
    _, page = login.prompt()
    assert provider.answer(page, "dave", "deny").status_code == 200
    rc, _, err = login.finish()
    assert rc == 4
    assert "the sign-in was denied at the identity provider" in err
    assert not credentials_path(config_home).exists()


def test_an_unanswered_code_expires_and_stores_nothing(
    server: ServerProcess, provider: Provider, config_home: Path
) -> None:
    login = Login(server, config_home, "--client-id", EXPIRING)
    login.prompt()
    rc, _, err = login.finish()
    assert rc == 4
    assert "the code expired before it was approved" in err and "gpupool login" in err
    assert not credentials_path(config_home).exists()
