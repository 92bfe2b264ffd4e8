"""What a request may make the server store or do: sizes, cursors, idempotency keys, and
the audit trail under a flood (M2, L1, L2, L5), against a real server.

The attacks: a 100 MB submit was accepted (the team's job list became 137 MB); tampered
cursors (a time without a zone, deep JSON, an audit id past 2^63) answered 500; the same
Idempotency-Key with another body silently returned the first job; 2,000 unauthenticated
POSTs wrote 2,000 audit rows in 6 s.
"""

from __future__ import annotations

import base64
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from support.demo_server import TERMINAL, demo_server, submit, wait_status
from support.server import ServerProcess

MIB = 1024 * 1024
ARTIFACT_CAP = 4096

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    env = {"GPUPOOL_MAX_ARTIFACT_BYTES": str(ARTIFACT_CAP), "GPUPOOL_AUDIT_SUMMARY_S": "1"}
    with demo_server(env) as started:
        yield started


def job_count(client: httpx.Client) -> int:
    return len(client.get("/v1/jobs", params={"limit": 500}).json()["items"])


# -- M2: sizes ------------------------------------------------------------------------------


def test_a_body_past_the_cap_is_refused_before_it_is_parsed(server: ServerProcess) -> None:
    with server.client("alice") as alice:
        before = job_count(alice)
        big = {"command": ["true"], "env": {"BIG": "x" * (2 * MIB)}}
        declared = alice.post("/v1/jobs", json=big)
        raw = json.dumps(big).encode()

        def pieces() -> Iterator[bytes]:  # no Content-Length: chunked
            for at in range(0, len(raw), 64 * 1024):
                yield raw[at : at + 64 * 1024]

        chunked = alice.post(
            "/v1/jobs", content=pieces(), headers={"Content-Type": "application/json"}
        )
        after = job_count(alice)
    for reply in (declared, chunked):
        assert reply.status_code == 413, reply.text[:300]
        error = reply.json()["error"]
        assert error["code"] == "payload_too_large"
        assert "GPUPOOL_MAX_BODY_BYTES" in error["message"] and "1048576" in error["message"]
    assert after == before


@dataclass(frozen=True)
class Oversize:
    body: dict[str, Any]
    field: str
    names: str  # what the message must name: the limit's variable, or the schema's bound


OVERSIZE = [
    pytest.param(
        Oversize({"env": {f"V{i}": "1" for i in range(300)}}, "env", "GPUPOOL_MAX_ENV_ENTRIES"),
        id="300 env variables",
    ),
    pytest.param(
        Oversize({"env": {"BLOB": "x" * (100 * 1024)}}, "env", "GPUPOOL_MAX_ENV_BYTES"),
        id="100 KiB of env",
    ),
    pytest.param(
        Oversize(
            {"command": ["echo"] + ["y" * 1024] * 300}, "command", "GPUPOOL_MAX_COMMAND_BYTES"
        ),
        id="300 KiB of command",
    ),
    pytest.param(
        Oversize({"inputs": [f"shared/in/{i}" for i in range(300)]}, "inputs", "MAX_DATA_PATHS"),
        id="300 inputs",
    ),
    pytest.param(
        Oversize({"outputs": [f"shared/out/{i}" for i in range(300)]}, "outputs", "DATA_PATHS"),
        id="300 outputs",
    ),
    pytest.param(Oversize({"name": "n" * 201}, "name", "200"), id="a 201-character name"),
]


@pytest.mark.parametrize("case", OVERSIZE)
def test_fields_past_their_limits_are_refused_naming_them(
    server: ServerProcess, case: Oversize
) -> None:
    with server.client("alice") as alice:
        before = job_count(alice)
        reply = alice.post("/v1/jobs", json={"command": ["true"], **case.body})
        after = job_count(alice)
    assert reply.status_code == 422, reply.text[:300]
    details = reply.json()["error"]["details"]
    assert [d["field"] for d in details] == [case.field]
    assert case.names in details[0]["message"]
    assert after == before


UPLOAD = """
import http.client, os, urllib.parse
url = urllib.parse.urlsplit(os.environ["GPUPOOL_OUTPUT_URL"])
for name, size in (("small.bin", 1000), ("big.bin", 3 * CAP)):
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    body = (b"x" * 1000 for _ in range(size // 1000))  # chunked: no Content-Length
    conn.request("PUT", url.path + "/" + name + "?" + url.query, body=body,
                 encode_chunked=True)
    print(name, conn.getresponse().status, flush=True)
    conn.close()
""".replace("CAP", str(ARTIFACT_CAP))


def test_artifact_uploads_have_their_own_cap(server: ServerProcess) -> None:
    python = shutil.which("python3", path="/usr/bin:/usr/local/bin")
    assert python is not None, "a system python3 runs the job"
    declared = httpx.put(
        f"{server.url}/v1/artifacts/team-a/shared/x/big.bin?gp_sig=nothing",
        content=b"x" * (ARTIFACT_CAP + 1),
    )
    assert declared.status_code == 413, declared.text
    assert "GPUPOOL_MAX_ARTIFACT_BYTES" in declared.json()["error"]["message"]
    with server.client("alice") as alice:
        job = submit(alice, [python, "-c", UPLOAD], outputs=["shared/up"])
        done = wait_status(alice, job, TERMINAL)
        log = alice.get(f"/v1/jobs/{job}/logs").text
    assert done["status"] == "succeeded", log
    assert "small.bin 201" in log, log
    assert "big.bin 413" in log, log
    written = server.home / "storage" / "team-a" / "shared" / "up" / "attempt-1"
    assert (written / "small.bin").stat().st_size == 1000
    assert not (written / "big.bin").exists()


# -- L1: cursors ------------------------------------------------------------------------------


def b64(raw: bytes | str) -> str:
    return base64.urlsafe_b64encode(raw.encode() if isinstance(raw, str) else raw).decode()


@dataclass(frozen=True)
class Tampered:
    path: str
    cursor: str


TAMPERED = [
    pytest.param(
        Tampered("/v1/jobs", b64(json.dumps(["2026-01-01T00:00:00", "j-1"]))),
        id="job cursor: a time without a zone",
    ),
    pytest.param(
        Tampered("/v1/jobs", b64("[" * 5000 + "]" * 5000)), id="job cursor: deeply nested JSON"
    ),
    pytest.param(
        Tampered("/v1/jobs", b64(json.dumps(["0001-01-01T00:00:00+05:00", "j-1"]))),
        id="job cursor: a time before the first UTC time",
    ),
    pytest.param(Tampered("/v1/jobs", b64(json.dumps([1, 2]))), id="job cursor: numbers"),
    pytest.param(Tampered("/v1/jobs", b64(json.dumps({"a": 1}))), id="job cursor: an object"),
    pytest.param(Tampered("/v1/jobs", b64(b"\xff\xfe\xfd")), id="job cursor: not UTF-8"),
    pytest.param(Tampered("/v1/jobs", "!!!not-base64"), id="job cursor: not base64"),
    pytest.param(Tampered("/v1/audit", b64(f"a{2**63}")), id="audit cursor: id of 2^63"),
    pytest.param(Tampered("/v1/audit", b64("a" + "9" * 40)), id="audit cursor: a huge id"),
    pytest.param(Tampered("/v1/audit", b64("a-5")), id="audit cursor: a negative id"),
    pytest.param(Tampered("/v1/audit", b64("[" * 5000)), id="audit cursor: deep brackets"),
]


@pytest.mark.parametrize("case", TAMPERED)
def test_tampered_cursors_are_422_naming_the_cursor(server: ServerProcess, case: Tampered) -> None:
    with server.client("admin") as admin:
        reply = admin.get(case.path, params={"cursor": case.cursor})
    assert reply.status_code == 422, reply.text[:300]
    assert [d["field"] for d in reply.json()["error"]["details"]] == ["cursor"]


# -- L2: idempotency keys ---------------------------------------------------------------------


def test_an_idempotency_key_stands_for_one_body(server: ServerProcess) -> None:
    first = {"command": ["sleep", "0"], "env": {"A": "1"}, "resources": {"gpu_types": ["h100"]}}
    # The same job, spelt with its defaults written out.
    same = {**first, "kind": "training", "resources": {"gpu_types": ["h100"], "gpus": 1}}
    other = {**first, "command": ["sh", "-c", "echo something else"]}
    with server.client("alice") as alice:
        key = {"Idempotency-Key": f"k-{time.monotonic_ns()}"}
        created = alice.post("/v1/jobs", json=first, headers=key)
        replayed = alice.post("/v1/jobs", json=same, headers=key)
        refused = alice.post("/v1/jobs", json=other, headers=key)
        in_body = alice.post("/v1/jobs", json={**other, "idempotency_key": key["Idempotency-Key"]})
    assert created.status_code == 201, created.text
    assert replayed.status_code == 200 and replayed.json()["id"] == created.json()["id"]
    for reply, field in ((refused, "Idempotency-Key"), (in_body, "idempotency_key")):
        assert reply.status_code == 422, reply.text
        details = reply.json()["error"]["details"]
        assert [d["field"] for d in details] == [field]
        assert created.json()["id"] in details[0]["message"]


# -- L5: the audit trail under a flood --------------------------------------------------------


def audit_rows(admin: httpx.Client) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = admin.get("/v1/audit", params={"limit": 500}).json()["items"]
    return items


def how_many(row: dict[str, Any]) -> int:
    """The requests an anonymous row stands for: its count, or 1 for a row of its own."""
    first = (row["target"].split() or ["1"])[0]
    return int(first) if first.isdigit() else 1


def test_unauthenticated_floods_are_counted_not_recorded_one_by_one(
    server: ServerProcess,
) -> None:
    floods = 2000
    with server.client("admin") as admin, httpx.Client(base_url=server.url) as anyone:
        # Earlier tests on this server may have left a window of refusals open: let it close.
        time.sleep(1.5)
        newest = max((r["id"] for r in audit_rows(admin)), default=0)
        started = time.monotonic()
        for i in range(floods):
            headers = {"Authorization": "Bearer gpt_nope_wrongwrongwrong"} if i % 2 else {}
            reply = anyone.post("/v1/jobs", json={"command": ["true"]}, headers=headers)
            assert reply.status_code == 401
        flood_s = time.monotonic() - started
        with server.client("vera") as vera:  # a member's refusal is still recorded
            refused = vera.post("/v1/jobs", json={"command": ["true"], "team": "team-a"})
            assert refused.status_code == 403, refused.text
        deadline = time.monotonic() + 10
        while True:  # the last window is written a second after it opened
            fresh = [r for r in audit_rows(admin) if r["id"] > newest]
            anonymous = [r for r in fresh if r["actor"] == "-"]
            counted = sum(how_many(r) for r in anonymous)
            if counted >= floods or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    print(f"{floods} anonymous POSTs in {flood_s:.1f} s -> {len(anonymous)} audit row(s)")
    # One summary row per second of flood (GPUPOOL_AUDIT_SUMMARY_S=1), not one per request.
    assert 1 <= len(anonymous) <= flood_s + 2, anonymous[:5]
    assert counted == floods
    for row in anonymous:
        assert (row["action"], row["outcome"], row["status"]) == (
            "job.submit",
            "unauthenticated",
            401,
        )
    assert [r["actor"] for r in fresh if r["actor"] != "-"] == ["vera"]
