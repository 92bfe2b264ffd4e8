"""Per-job grants on the local storage, through the API: a job on a ``data_access: grant``
pool gets URLs for its inputs and outputs, reads and writes through ``/v1/artifacts``, and
every URL refuses what it was not made for."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

from gpupool.backends.base import Backend, BackendStatus, JobHandle, JobSpec, LogChunk
from gpupool.core.errors import Forbidden
from gpupool.data import safe_fs
from gpupool.data.grants.base import Grant, GrantError
from gpupool.data.storage import ensure_team_layouts
from gpupool.server.services.artifacts import WRITE_CHUNK, ArtifactService
from gpupool.state import config_store
from support.apikit import Api

POOL = "demo-shared-dev-t4-pool"
INPUT = "shared/datasets/x"
OUTPUT = "home/alice/ckpt"


class Recording:
    """Wraps the pool's real backend and keeps the specs it was given."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.name = inner.name
        self.capabilities = inner.capabilities
        self.specs: list[JobSpec] = []

    def submit(self, spec: JobSpec) -> JobHandle:
        self.specs.append(spec)
        return self.inner.submit(spec)

    def poll(self, handles: Sequence[JobHandle]) -> Mapping[str, BackendStatus]:
        return self.inner.poll(handles)

    def logs(self, handle: JobHandle, offset: int = 0) -> LogChunk:
        return self.inner.logs(handle, offset)

    def cancel(self, handle: JobHandle, grace_s: float) -> None:
        self.inner.cancel(handle, grace_s)


@pytest.fixture
def recording(api: Api, monkeypatch: pytest.MonkeyPatch) -> Recording:
    registry = api.runtime.execution._registry
    wrapped = Recording(registry.get(POOL))
    real_get = registry.get
    monkeypatch.setattr(registry, "get", lambda pool: wrapped if pool == POOL else real_get(pool))
    return wrapped


def team_root(api: Api, team: str = "team-a") -> Path:
    """The team's storage root, laid out as ``gpupool server`` does at start (as root: the
    server then applies the job user's permissions, so alice's home must be hers)."""
    ensure_team_layouts(api.runtime.config, api.runtime.settings.home)
    return api.runtime.settings.home / "storage" / team


def run_job(api: Api, recording: Recording, open_dir: Path) -> tuple[str, Grant]:
    seen = open_dir / "seen"
    job = api.submit(
        "alice",
        command=["sh", "-c", f'echo "$GPUPOOL_GRANT_KIND $GPUPOOL_OUTPUT_URL" > {seen}'],
        resources={"gpus": 1, "gpu_types": ["t4"]},
        inputs=[INPUT + "/"],
        outputs=[OUTPUT],
        max_runtime_s=600,
    )["id"]
    api.tick_until(lambda: api.status(job) == "succeeded", what="the job to finish")
    (spec,) = recording.specs
    assert spec.grant is not None
    kind, url = seen.read_text().split()
    assert kind == "local" and url == spec.grant.outputs[OUTPUT].url  # what the job saw
    return str(job), spec.grant


def put_url(target: str, name: str) -> str:
    base, _, query = target.partition("?")
    return f"{base}/{name}?{query}"


def test_a_job_reads_its_input_and_writes_its_output(
    api: Api, recording: Recording, open_dir: Path
) -> None:
    data = team_root(api) / INPUT
    data.mkdir(parents=True)
    (data / "part-0.csv").write_text("a,b\n1,2\n")
    job, grant = run_job(api, recording, open_dir)
    env = recording.specs[0].grant.env()  # type: ignore[union-attr]
    inputs = json.loads(env["GPUPOOL_INPUT_URLS"])
    assert list(inputs) == [INPUT]
    read = api.client.get(put_url(inputs[INPUT], "part-0.csv"))
    assert read.status_code == 200 and read.content == b"a,b\n1,2\n"

    outputs = json.loads(env["GPUPOOL_OUTPUT_URLS"])
    assert outputs[OUTPUT]["method"] == "PUT"
    wrote = api.client.put(put_url(outputs[OUTPUT]["url"], "model/weights.bin"), content=b"w")
    assert wrote.status_code == 201, wrote.text
    assert (team_root(api) / OUTPUT / "attempt-1" / "model" / "weights.bin").read_bytes() == b"w"

    detail = api.client.get(f"/v1/jobs/{job}", headers=api.as_("alice"))
    shown = detail.json()["attempts"][0]["grant"]
    assert shown["kind"] == "local"
    assert shown["reads"] == [INPUT] and shown["writes"] == [f"{OUTPUT}/attempt-1"]
    assert shown["expires_at"].startswith(grant.scope.expires_at.isoformat()[:16])
    assert "gp_sig" not in detail.text


def test_a_pool_identity_pool_gives_no_grant(
    api: Api, recording: Recording, demo_path: Path
) -> None:
    # The demo with every pool on pool-identity, applied as a new configuration version.
    text = demo_path.read_text().replace("data_access: grant", "data_access: pool-identity")
    live = api.runtime.live
    assert live is not None and "data_access: pool-identity" in text
    with api.runtime.sessions.begin() as session:
        config_store.append(
            session,
            base=live.version,
            text=text,
            at=api.runtime.clock.now(),
            applied_by="test",
            source=str(demo_path),
            summary="pools without grants",
        )
    assert live.refresh()
    assert {p.data_access for p in api.runtime.current_config().pools} == {"pool-identity"}
    job = api.submit(
        "alice", resources={"gpus": 1, "gpu_types": ["t4"]}, inputs=[INPUT], outputs=[OUTPUT]
    )["id"]
    api.tick_until(lambda: api.status(job) == "succeeded", what="the job to finish")
    (spec,) = recording.specs
    assert spec.grant is None
    assert api.job("alice", job)["attempts"][0]["grant"] is None  # type: ignore[index]


@dataclass(frozen=True)
class Denied:
    method: str  # of the request
    grant: str  # which URL: "read" or "write"
    path: str  # appended to the URL's path ("" = the URL as given)
    edit: tuple[tuple[str, str], ...] = ()
    team: str = ""  # replaces the team in the URL's path
    status: int = 403
    message: str = ""


DENIALS = [
    pytest.param(Denied("PUT", "read", "", message="allows GET only"), id="write with a read URL"),
    pytest.param(
        Denied("GET", "write", "/x", message="allows PUT only"), id="read with a write URL"
    ),
    pytest.param(
        Denied("GET", "read", "/../../y", message="outside this URL's scope"),
        id="dot-dot, resolved by the client",
    ),
    pytest.param(
        Denied("GET", "read", "/%2E%2E/%2E%2E/y", status=422, message="contains '..'"),
        id="dot-dot that reaches the server",
    ),
    pytest.param(Denied("GET", "read", "y", message="outside this URL's scope"), id="sibling"),
    pytest.param(
        Denied("GET", "read", "", edit=(("gp_scope", "shared"),), message="does not match"),
        id="widened scope",
    ),
    pytest.param(
        Denied("GET", "read", "", edit=(("gp_exp", "4102444800"),), message="does not match"),
        id="extended expiry",
    ),
    pytest.param(
        Denied("GET", "read", "", edit=(("gp_sig", "AAAA"),), message="does not match"),
        id="forged signature",
    ),
    pytest.param(
        Denied("GET", "read", "", team="team-b", message="does not match"),
        id="another team's storage",
    ),
    pytest.param(
        Denied("PUT", "write", "/f", edit=(("gp_sig", ""),), message="not a signed URL"),
        id="signature removed",
    ),
]


@pytest.mark.parametrize("case", DENIALS)
def test_urls_refuse_what_they_were_not_made_for(
    api: Api, recording: Recording, open_dir: Path, case: Denied
) -> None:
    (team_root(api) / INPUT).mkdir(parents=True)
    (team_root(api) / INPUT / "f").write_text("secret of team-a")
    _, grant = run_job(api, recording, open_dir)
    url = grant.inputs[INPUT] if case.grant == "read" else grant.outputs[OUTPUT].url
    parts = urlsplit(url)
    path = parts.path + case.path
    if case.team:
        path = path.replace("/team-a/", f"/{case.team}/", 1)
    query = {**dict(parse_qsl(parts.query)), **dict(case.edit)}
    response = api.client.request(case.method, f"{path}?{urlencode(query)}", content=b"x")
    assert response.status_code == case.status, response.text
    assert case.message in response.text
    assert dict(parse_qsl(parts.query))["gp_sig"] not in response.text
    assert b"secret of team-a" not in response.content
    assert (team_root(api) / INPUT / "f").read_text() == "secret of team-a"


def test_an_expired_url_is_refused(api: Api) -> None:
    (team_root(api) / "shared").mkdir(parents=True, exist_ok=True)
    (team_root(api) / "shared" / "f").write_text("x")
    signer = api.runtime.signer
    assert signer is not None
    past = int((api.runtime.clock.now() - timedelta(seconds=1)).timestamp())
    response = api.client.get(
        f"/v1/artifacts/team-a/shared/f?{signer.query('GET', 'team-a', 'alice', 'shared/f', past)}"
    )
    assert response.status_code == 403
    assert "expired at" in response.json()["error"]["message"]


def test_a_symlink_cannot_lead_a_url_out_of_the_team_root(api: Api, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("not team-a's")
    (team_root(api) / "shared").mkdir(parents=True, exist_ok=True)
    (team_root(api) / "shared" / "link").symlink_to(outside)
    signer = api.runtime.signer
    assert signer is not None
    later = int((api.runtime.clock.now() + timedelta(hours=1)).timestamp())
    query = signer.query("GET", "team-a", "alice", "shared/link", later)
    response = api.client.get(f"/v1/artifacts/team-a/shared/link/f?{query}")
    assert response.status_code == 403
    assert "shared/link is a symbolic link" in response.json()["error"]["message"]


@dataclass(frozen=True)
class BadPaths:
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(BadPaths(inputs=("shared/a", "/etc/passwd"), fields=("inputs[1]",)), id="abs"),
        pytest.param(BadPaths(inputs=("shared/../../x",), fields=("inputs[0]",)), id="dot-dot"),
        pytest.param(BadPaths(outputs=("home/bob/out",), fields=("outputs[0]",)), id="bob's home"),
        pytest.param(
            BadPaths(inputs=("",), outputs=("x",), fields=("inputs[0]", "outputs[0]")), id="two"
        ),
    ],
)
def test_submit_rejects_paths_outside_the_team_areas(api: Api, case: BadPaths) -> None:
    response = api.client.post(
        "/v1/jobs",
        json={"command": ["true"], "inputs": list(case.inputs), "outputs": list(case.outputs)},
        headers=api.as_("alice"),
    )
    assert response.status_code == 422
    assert [d["field"] for d in response.json()["error"]["details"]] == list(case.fields)


def test_a_grant_that_cannot_be_minted_holds_the_attempt_back(
    api: Api, recording: Recording, monkeypatch: pytest.MonkeyPatch
) -> None:
    issuer = api.runtime.controller._grants
    assert issuer is not None
    real_issue = issuer.issue

    def unreachable(*args: object, **kwargs: object) -> Grant:
        raise GrantError("storage unreachable (test outage)")

    monkeypatch.setattr(issuer, "issue", unreachable)
    job = api.submit("alice", resources={"gpus": 1, "gpu_types": ["t4"]}, inputs=[INPUT])["id"]
    api.tick_until(lambda: api.status(job) == "admitted", what="the admission")
    for _ in range(5):
        api.runtime.controller.tick()
    assert api.status(job) == "admitted" and recording.specs == []  # held, never sent
    pools = api.client.get("/v1/pools", headers=api.as_("alice")).json()["items"]
    t4 = next(p for p in pools if p["name"] == POOL)
    assert t4["available"] is False and "data grant: storage unreachable" in t4["message"]

    monkeypatch.setattr(issuer, "issue", real_issue)
    api.tick_until(lambda: api.status(job) == "succeeded", timeout=30, what="the retry")
    assert recording.specs[0].grant is not None


@dataclass(frozen=True)
class Membership:
    user: str
    groups: tuple[str, ...] | None = None  # the directory file's groups of the user; None: none
    oidc: bool = False  # group members may also come from a token's claim
    allowed: bool = True


MEMBERSHIPS = [
    pytest.param(Membership("alice"), id="a members: entry"),
    pytest.param(Membership("bob", allowed=False), id="a member of another team"),
    pytest.param(Membership("dora", ("TeamA",)), id="in the team's group per the directory"),
    pytest.param(Membership("dora", ("TeamB",), allowed=False), id="directory: another group"),
    pytest.param(Membership("dora", allowed=False), id="unknown, and no group source"),
    pytest.param(Membership("dora", oidc=True), id="a group claim cannot be re-read: trusted"),
]


@pytest.mark.parametrize("case", MEMBERSHIPS)
def test_a_url_is_void_once_its_user_is_not_in_the_team(api: Api, case: Membership) -> None:
    (team_root(api) / "shared" / "f").write_text("x")
    runtime = api.runtime
    assert runtime.signer is not None
    service = ArtifactService(
        runtime.signer,
        runtime.current_config,
        runtime.settings.home,
        runtime.clock,
        groups_of=None if case.groups is None else lambda user: frozenset(case.groups or ()),
        unverified_groups=case.oidc,
        as_root=False,  # membership only: dora has no POSIX identity (as root: next test)
    )
    later = int((runtime.clock.now() + timedelta(hours=1)).timestamp())
    query = dict(parse_qsl(runtime.signer.query("GET", "team-a", case.user, "shared/f", later)))
    if case.allowed:
        service.read("team-a", "shared/f", query).close()
        return
    with pytest.raises(Forbidden, match=f"user '{case.user}' is no longer in team team-a"):
        service.read("team-a", "shared/f", query)


@pytest.mark.skipif(os.geteuid() != 0, reason="permissions are applied only as root: run as root")
@pytest.mark.parametrize("method", ["GET", "PUT"])
def test_as_root_a_url_of_a_user_without_a_posix_identity_is_refused(api: Api, method: str) -> None:
    # dora is in the team through a group but not under users: (e.g. removed from it after
    # her URL was made). Without a uid to check as, root would read any member's home.
    (team_root(api) / "shared" / "f").write_text("x")
    runtime = api.runtime
    assert runtime.signer is not None
    service = ArtifactService(
        runtime.signer,
        runtime.current_config,
        runtime.settings.home,
        runtime.clock,
        groups_of=lambda user: frozenset({"TeamA"}),
    )
    later = int((runtime.clock.now() + timedelta(hours=1)).timestamp())
    path = "shared/f" if method == "GET" else "shared/out/g"
    scope = "shared/f" if method == "GET" else "shared/out"
    query = dict(parse_qsl(runtime.signer.query(method, "team-a", "dora", scope, later)))

    async def body() -> AsyncIterator[bytes]:
        yield b"planted"

    with pytest.raises(Forbidden, match="'dora' has no POSIX identity"):
        if method == "GET":
            service.read("team-a", path, query).close()
        else:
            asyncio.run(service.write("team-a", path, query, body()))
    assert not (team_root(api) / "shared" / "out").exists()


def test_without_root_links_are_still_refused_and_nothing_is_re_owned(api: Api) -> None:
    """A server that is not root applies no user's permissions (it can only do what its own
    uid may, like its jobs) and gives no owners; it still never follows a link."""
    runtime = api.runtime
    assert runtime.signer is not None
    service = ArtifactService(
        runtime.signer,
        runtime.current_config,
        runtime.settings.home,
        runtime.clock,
        as_root=False,
    )
    root = team_root(api)
    (root / "shared" / "link").symlink_to(root / "home")
    later = int((runtime.clock.now() + timedelta(hours=1)).timestamp())
    query = dict(parse_qsl(runtime.signer.query("PUT", "team-a", "alice", "shared/o", later)))

    async def body() -> AsyncIterator[bytes]:
        yield b"data"

    assert asyncio.run(service.write("team-a", "shared/o/f", query, body())) == 4
    made = root / "shared" / "o" / "f"
    assert made.read_bytes() == b"data" and made.stat().st_uid == os.geteuid()
    query = dict(parse_qsl(runtime.signer.query("PUT", "team-a", "alice", "shared/link", later)))
    with pytest.raises(Forbidden, match="shared/link is a symbolic link"):
        asyncio.run(service.write("team-a", "shared/link/f", query, body()))
    assert not (root / "home" / "f").exists()


def test_a_large_file_is_served_whole_from_the_opened_file(api: Api) -> None:
    data = os.urandom(2 * 1024 * 1024 + 123)  # more than one read chunk
    (team_root(api) / "shared" / "big.bin").write_bytes(data)
    signer = api.runtime.signer
    assert signer is not None
    later = int((api.runtime.clock.now() + timedelta(hours=1)).timestamp())
    query = signer.query("GET", "team-a", "alice", "shared/big.bin", later)
    response = api.client.get(f"/v1/artifacts/team-a/shared/big.bin?{query}")
    assert response.status_code == 200
    assert response.headers["content-length"] == str(len(data)) and response.content == data


def test_a_write_touches_the_disk_off_the_event_loop(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stalled disk must not stall every request: each file system call of a PUT runs on a
    worker thread, in writes of WRITE_CHUNK bytes however small the body's chunks are."""
    runtime = api.runtime
    assert runtime.signer is not None
    service = ArtifactService(
        runtime.signer, runtime.current_config, runtime.settings.home, runtime.clock
    )
    loop_threads: set[int] = set()
    writes: list[tuple[int, int]] = []  # (thread, size)
    real = safe_fs.PendingWrite.write

    def recording(pending: safe_fs.PendingWrite, chunk: bytes) -> None:
        writes.append((threading.get_ident(), len(chunk)))
        real(pending, chunk)

    monkeypatch.setattr(safe_fs.PendingWrite, "write", recording)
    root = team_root(api)  # laid out
    data = os.urandom(WRITE_CHUNK * 2 + 100)
    later = int((runtime.clock.now() + timedelta(hours=1)).timestamp())
    query = dict(parse_qsl(runtime.signer.query("PUT", "team-a", "alice", "shared/w", later)))

    async def body() -> AsyncIterator[bytes]:
        loop_threads.add(threading.get_ident())
        for at in range(0, len(data), 4096):
            yield data[at : at + 4096]

    assert asyncio.run(service.write("team-a", "shared/w/f", query, body())) == len(data)
    assert (root / "shared" / "w" / "f").read_bytes() == data
    assert [size for _, size in writes] == [WRITE_CHUNK, WRITE_CHUNK, 100]
    assert not loop_threads & {thread for thread, _ in writes}
