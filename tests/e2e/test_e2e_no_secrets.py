"""No secret in anything gpupool writes (D4): a whole job lifecycle at DEBUG level.

A real ``gpupool server`` (stdout and stderr captured), the SDK in this process (every log
record captured at DEBUG) and the CLI in subprocesses (stdout and stderr captured) run jobs
whose environment, command and output carry a credential of every kind, make requests with
secrets in their query and in a bad bearer token, and read everything back. No byte of any
secret may appear in what was captured, except the API tokens the server prints, once, on its
first start. On pools with ``data_access: grant`` a job also fetches its input through its
signed URL, so the grant's ``gp_sig`` passes through the server's access log.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupool.client import Client, GpupoolError
from gpupool.spec.load import load_config
from support.server import ServerProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def token() -> str:
    return secrets.token_urlsafe(18).replace("-", "x").replace("_", "y")


SAS_SIG, AMZ_SIG, AMZ_CRED, BEARER, GP_SIG, START_SIG, QUERY_SIG, DB_PASSWORD = (
    token() for _ in range(8)
)
JWT_SIG = token()
JWT = f"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.{JWT_SIG}"
BAD_JWT_SIG = token()
BAD_JWT = f"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJtYWxsb3J5In0.{BAD_JWT_SIG}"
PLANTED = {
    "Azure SAS": SAS_SIG,
    "S3 signature": AMZ_SIG,
    "S3 credential": AMZ_CRED,
    "bearer token": BEARER,
    "JWT": JWT_SIG,
    "gpupool grant signature": GP_SIG,
    "signature in a failed command": START_SIG,
    "signature in a query": QUERY_SIG,
    "password in a URL": DB_PASSWORD,
    "rejected JWT": BAD_JWT_SIG,
}
SECRET_ENV = {
    "SAS_URL": f"https://acct.blob.core.windows.net/team-a/in.bin?sv=2022-11-02&sp=r&sig={SAS_SIG}",
    "S3_URL": (
        "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential={AMZ_CRED}&X-Amz-Signature={AMZ_SIG}"
    ),
    "BEARER": BEARER,
    "ID_TOKEN": JWT,
    "DATABASE_URL": f"postgresql://gp:{DB_PASSWORD}@db:5432/gp",
}
# Prints every secret it was given, then fails (so the failure path is covered too).
LEAKY = (
    'echo "fetch $SAS_URL"; echo "put $S3_URL"; echo "Authorization: Bearer $BEARER"; '
    'echo "id_token $ID_TOKEN"; echo "db $DATABASE_URL"; echo "token $MY_TOKEN"; '
    f'echo "artifact https://h/v1/artifacts/a?gp_exp=1&gp_sig={GP_SIG}"; exit 3'
)
# Reads its input through the grant's signed URL, writes its output through the other.
FETCH = """
import json, os, urllib.request
for url in json.loads(os.environ["GPUPOOL_INPUT_URLS"]).values():
    print("input:", urllib.request.urlopen(url).read().decode().strip(), "from", url)
out = json.loads(os.environ["GPUPOOL_OUTPUT_URLS"])
for target in out.values():
    base, _, query = target["url"].partition("?")
    url = f"{base}/result.txt?{query}"  # a file under the attempt's output prefix
    request = urllib.request.Request(url, data=b"result", method=target["method"])
    print("output:", urllib.request.urlopen(request).status, "to", url)
print(dict(os.environ))
"""


class Captured:
    def __init__(self) -> None:
        self.parts: list[tuple[str, str]] = []

    def add(self, where: str, text: str) -> None:
        self.parts.append((where, text))

    def where(self, secret: str) -> list[str]:
        """Each leak as ``place: line``, the secret itself shown as <SECRET>."""
        return [
            f"{where}: {line.replace(secret, '<SECRET>')[:300]}"
            for where, text in self.parts
            for line in text.splitlines()
            if secret in line
        ]


@pytest.fixture
def sdk_log() -> Iterator[io.StringIO]:
    """Every log record this process makes (the SDK's, httpx's), at DEBUG."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture
def server(
    open_dir: Path, demo_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ServerProcess]:
    monkeypatch.setenv("GPUPOOL_LOG_LEVEL", "debug")
    started = ServerProcess(open_dir / "home", demo_path)
    started.start()
    try:
        yield started
    finally:
        started.stop()


def cli(server: ServerProcess, captured: Captured, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GPUPOOL_URL": server.url,
        "GPUPOOL_TOKEN": server.tokens["alice"],
        "COLUMNS": "200",
    }
    done = subprocess.run(
        [sys.executable, "-m", "gpupool", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    captured.add(f"cli {args[0]} stdout", done.stdout)
    captured.add(f"cli {args[0]} stderr", done.stderr)
    return done


def wait_finished(sdk: Client, job_ids: list[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not all(sdk.job(j).finished for j in job_ids):
        assert time.monotonic() < deadline, [sdk.job(j).status for j in job_ids]
        time.sleep(0.2)


def grant_pool_gpu_type(demo_path: Path) -> str | None:
    config = load_config(demo_path)
    pools = [p for p in config.pools if getattr(p, "data_access", None) == "grant"]
    return pools[0].gpu_type if pools else None


def test_no_secret_in_anything_written(
    server: ServerProcess, demo_path: Path, sdk_log: io.StringIO
) -> None:
    captured = Captured()
    api_token = server.tokens["alice"]
    planted = dict(PLANTED, **{"API token": api_token.rsplit("_", 1)[1]})
    env_args = [f"--env={k}={v}" for k, v in {**SECRET_ENV, "MY_TOKEN": api_token}.items()]

    # A job through the CLI that prints every secret and fails.
    done = cli(
        server, captured, "submit", "--json", "--gpu-type", "t4", *env_args, "--", "sh", "-c", LEAKY
    )
    assert done.returncode == 0, done.stderr
    leaky = json.loads(done.stdout)["id"]

    with Client(server.url, api_token) as sdk:
        # A command that cannot start: its name, with a signature, lands in messages and events.
        unstartable = sdk.submit(
            [f"/nonexistent/tool?sig={START_SIG}"], gpu_types=["t4"], env=SECRET_ENV
        ).id
        jobs = [leaky, unstartable]
        grant_type = grant_pool_gpu_type(demo_path)
        if grant_type is not None:
            data = Path(server.home) / "storage" / "team-a" / "shared" / "datasets"
            data.mkdir(parents=True, exist_ok=True)
            (data / "in.txt").write_text("hello from team-a\n")
            jobs.append(
                sdk.submit(
                    ["/usr/bin/python3", "-c", FETCH],
                    gpu_types=[grant_type],
                    inputs=["shared/datasets/in.txt"],
                    outputs=["shared/results"],
                ).id
            )
        wait_finished(sdk, jobs)
        finished = {j: sdk.job(j) for j in jobs}
        # The API gives a user back the env and command they submitted; never a grant.
        bodies = repr(finished)
        for call in (
            lambda: sdk.jobs(team=f"team-a?sig={QUERY_SIG}"),
            lambda: sdk.submit(["true"], priority_class=f"https://h/x?sig={QUERY_SIG}"),
        ):
            with pytest.raises(GpupoolError) as rejected:
                call()
            captured.add("sdk error", f"{rejected.value!s} {rejected.value!r}")
    with Client(server.url, BAD_JWT) as stranger, pytest.raises(GpupoolError) as rejected:
        stranger.whoami()
    captured.add("sdk error", f"{rejected.value!s} {rejected.value!r}")

    for job in jobs:
        for args in (["job", job], ["job", job, "--json"], ["logs", job], ["logs", "-f", job]):
            assert cli(server, captured, *args).returncode == 0
    cli(server, captured, "jobs", "--all")
    cli(server, captured, "jobs", "--team", f"x?sig={QUERY_SIG}")
    cli(server, captured, "submit", "--priority", f"https://h/x?sig={QUERY_SIG}", "--", "true")
    cli(server, captured, "--token", BAD_JWT, "whoami")
    server.stop()

    first_start = re.compile(r"^\s+\S+\s+gpt_\S+$")
    server_log = server.log.read_text()
    captured.add(
        "server stdout+stderr",
        "\n".join(line for line in server_log.splitlines() if not first_start.match(line)),
    )
    captured.add("sdk logging", sdk_log.getvalue())

    # What the jobs really printed (on disk, never shown): the grant's signatures come from it.
    raw = b"".join(p.read_bytes() for p in Path(server.home).rglob("output.log")).decode()
    for name, value in PLANTED.items():
        if name not in ("signature in a query", "rejected JWT"):
            assert value in raw or name == "signature in a failed command", name
    minted = set(re.findall(r"gp_sig=([A-Za-z0-9_%-]+)", raw)) - {GP_SIG}
    if grant_type is not None:
        assert minted, raw  # the grant job printed its signed URLs
        assert "input: hello from team-a" in raw
        assert "output: 20" in raw  # 200 or 201: written through the grant
        planted.update({f"minted grant signature {i}": s for i, s in enumerate(sorted(minted))})
        assert not any(s in bodies for s in minted)
        assert "/v1/artifacts/" in server_log  # the access log saw the signed requests

    leaks = {name: captured.where(value) for name, value in planted.items()}
    assert {name: where for name, where in leaks.items() if where} == {}
    # Not vacuous: the secrets' surroundings were shown, masked, and debug logging was on.
    shown = "\n".join(text for _, text in captured.parts)
    for visible in (
        "fetch https://acct.blob.core.windows.net",
        "sig=[REDACTED]",
        "gp_sig=[REDACTED]",
    ):
        assert visible in shown
    assert "DEBUG" in server_log and "GET /v1/jobs" in server_log
