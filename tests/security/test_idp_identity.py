"""A user known only to the identity provider runs a job as their own uid (T3, ``auth.posix``).

ivan is in no ``users:`` entry and no team's members: the local provider puts him in group
TeamA (mapped to team-a) and sends his uid and gid as claims (``uidNumber``, ``gidNumber``). He
signs in, submits, and his job runs as that uid with team-a's gid; a token claiming uid 0 gives
no identity, so its submit is refused.
"""

from __future__ import annotations

import pwd
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from support.hostile import TERMINAL, UnixWorld, _job_python, cluster_config
from support.oidc_provider import Provider, start_provider
from support.server import ServerProcess


@pytest.fixture(scope="module")
def ivan() -> Iterator[pwd.struct_passwd]:
    name = f"gpivan{secrets.token_hex(3)}"
    subprocess.run(["useradd", "-M", "-U", "-s", "/usr/sbin/nologin", name], check=True)
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["pkill", "-KILL", "-u", name], check=False, capture_output=True)
        subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture(scope="module")
def provider(ivan: pwd.struct_passwd) -> Provider:
    found = start_provider()
    found.set_users(
        "ivan",
        "mallory",
        groups=["TeamA"],
        claims={
            "ivan": {"uidNumber": ivan.pw_uid, "gidNumber": ivan.pw_gid},
            "mallory": {"uidNumber": 0, "gidNumber": 0},
        },
    )
    return found


@pytest.fixture(scope="module")
def server(unix_world: UnixWorld, provider: Provider) -> Iterator[ServerProcess]:
    base = Path(tempfile.mkdtemp(prefix="gpupool-idp-"))
    base.chmod(0o711)  # jobs traverse to their work dirs below GPUPOOL_HOME
    config = yaml.safe_load(cluster_config(unix_world))
    config["teams"]["team-a"]["groups"] = ["TeamA"]
    path = base / "cluster.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {
        "GPUPOOL_OIDC_ISSUER": provider.issuer,
        "GPUPOOL_OIDC_AUDIENCE": "gpupool",
        "GPUPOOL_OIDC_UID_CLAIM": "uidNumber",
        "GPUPOOL_OIDC_GID_CLAIM": "gidNumber",
    }
    process = ServerProcess(base / "home", path, env=env)
    process.start()
    try:
        yield process
    finally:
        process.stop()
        shutil.rmtree(base, ignore_errors=True)


def submit(server: ServerProcess, token: str, command: list[str]) -> httpx.Response:
    body = {
        "command": command,
        "team": "team-a",
        "resources": {"gpus": 1, "gpu_types": ["h100"], "cpus": 1, "memory_gb": 1},
    }
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.post(f"{server.url}/v1/jobs", json=body, headers=headers, timeout=30)


def test_a_user_known_only_to_the_provider_runs_as_their_uid(
    server: ServerProcess, provider: Provider, unix_world: UnixWorld, ivan: pwd.struct_passwd
) -> None:
    token = provider.password_token("ivan")
    script = "import os; print(os.getuid(), os.getgid(), sorted(os.getgroups()))"
    created = submit(server, token, [_job_python(), "-c", script])
    assert created.status_code == 201, created.text
    job_id = created.json()["id"]
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}) as api:
        job: dict[str, object] = {}
        for _ in range(600):
            job = api.get(f"/v1/jobs/{job_id}").json()
            if job["status"] in TERMINAL:
                break
            __import__("time").sleep(0.1)
        log = api.get(f"/v1/jobs/{job_id}/logs").text
    assert job["status"] == "succeeded", (job, log)
    uid, gid, groups = log.split(maxsplit=2)
    assert (int(uid), int(gid)) == (ivan.pw_uid, ivan.pw_gid)
    assert str(unix_world.groups["team-a"]) in groups


def test_a_token_that_claims_root_gives_no_identity(
    server: ServerProcess, provider: Provider
) -> None:
    refused = submit(server, provider.password_token("mallory"), ["true"])
    assert refused.status_code == 403, refused.text
    assert "no POSIX identity" in refused.json()["error"]["message"]
