"""``gpupool webhook serve`` over real HTTPS: AdmissionReview requests in the API server's wire
format are POSTed to a running server with a self-signed certificate made here; each patch it
returns is applied to the object and the result checked."""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import pytest

from gpupool.auth.directory import Directory
from gpupool.k8s.webhook_server import ConfigFile, Webhook, WebhookServer, make_server
from support.admission_reviews import job, pod, review, without_nulls
from support.certs import self_signed
from support.k8s_schemas import problems

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "examples" / "demo.yaml"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


@dataclass
class Running:
    url: str
    client: httpx.Client
    server: WebhookServer
    config: Path
    cert: Path
    key: Path
    directory: Path

    def post(self, body: Any) -> httpx.Response:
        return self.client.post(f"{self.url}/mutate", json=body)


@pytest.fixture
def webhook(tmp_path: Path) -> Iterator[Running]:
    config = tmp_path / "cluster.yaml"
    shutil.copy(DEMO, config)
    directory = tmp_path / "directory.yaml"
    directory.write_text("groups: {TeamB: [dave]}\nusers: {dave: {uid: 10010, gid: 10010}}\n")
    cert, key, _ = self_signed(tmp_path)
    hook = Webhook(ConfigFile(config), Directory(directory), "oidc:", frozenset({JOB_CONTROLLER}))
    server = make_server(hook, "127.0.0.1", 0, cert, key)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{server.server_address[1]}"
    context = ssl.create_default_context(cafile=str(cert))
    with httpx.Client(verify=context, timeout=10) as client:
        yield Running(url, client, server, config, cert, key, directory)
    server.shutdown()
    server.server_close()
    thread.join(timeout=5)


def patched(body: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    response = answer["response"]
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(body["request"]["object"], ops)
    assert problems(without_nulls(result)) == []
    return result


ALICE = {
    "runAsUser": 10001,
    "runAsGroup": 20001,
    "fsGroup": 20001,
    "supplementalGroups": [30001],
    "supplementalGroupsPolicy": "Strict",
}


@dataclass(frozen=True)
class Case:
    body: dict[str, Any]
    allowed: bool
    security: dict[str, Any] | None = None  # after the patch; None: no patch expected
    message: str = ""


CASES = [
    pytest.param(Case(review(pod(), username="oidc:alice"), True, ALICE), id="create"),
    pytest.param(
        Case(review(pod(), username="oidc:alice", dry_run=True), True, ALICE), id="dry run"
    ),
    pytest.param(
        Case(
            review(job(namespace="team-b"), username="oidc:dave"),
            True,
            {
                "runAsUser": 10010,
                "runAsGroup": 10010,
                "fsGroup": 10010,
                "supplementalGroups": [30002],
                "supplementalGroupsPolicy": "Strict",
            },
        ),
        id="a Job by a user of the directory file",
    ),
    pytest.param(
        Case(
            review(pod(security=ALICE), "UPDATE", username="oidc:alice", old=pod(security=ALICE)),
            True,
        ),
        id="an update that keeps the identity",
    ),
    pytest.param(
        Case(
            review(
                pod(security={**ALICE, "runAsUser": 10002}),
                "UPDATE",
                username="oidc:alice",
                old=pod(security=ALICE),
            ),
            False,
            message="cannot change after it is created",
        ),
        id="an update that changes it",
    ),
    pytest.param(
        Case(review(pod(namespace="monitoring"), username="system:serviceaccount:x:y"), True),
        id="an ignored namespace",
    ),
    pytest.param(
        Case(review(pod(security=ALICE), username=JOB_CONTROLLER), True),
        id="the Job controller's pod of a stamped Job",
    ),
    pytest.param(
        Case(
            review(pod(), username="oidc:mallory"),
            False,
            message="user 'oidc:mallory' has no POSIX identity in gpupool",
        ),
        id="an unknown user",
    ),
    pytest.param(
        Case(
            review(pod(security={"runAsUser": 0}), username="oidc:alice"),
            False,
            message="runAsUser is 0 (root)",
        ),
        id="root",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_admission_over_https(webhook: Running, case: Case) -> None:
    reply = webhook.post(case.body)
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/json"
    answer = reply.json()
    response = answer["response"]
    assert answer["kind"] == "AdmissionReview" and answer["apiVersion"] == "admission.k8s.io/v1"
    assert response["uid"] == case.body["request"]["uid"]
    assert response["allowed"] is case.allowed
    if not case.allowed:
        assert case.message in response["status"]["message"]
        assert response["status"]["code"] == 403
    elif case.security is None:
        assert "patch" not in response
    else:
        obj = patched(case.body, answer)
        spec = obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]
        assert spec["securityContext"] == case.security


def test_what_is_not_an_admission_review(webhook: Running) -> None:
    assert webhook.client.get(f"{webhook.url}/healthz").text == "ok"
    assert webhook.client.get(f"{webhook.url}/metrics").status_code == 404
    assert webhook.client.post(f"{webhook.url}/validate", json={}).status_code == 404
    bad = webhook.client.post(f"{webhook.url}/mutate", content=b"{not json")
    assert bad.status_code == 400 and "not JSON" in bad.json()["error"]
    old = webhook.post({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"})
    assert old.status_code == 400 and "admission.k8s.io/v1" in old.json()["error"]
    huge = webhook.client.post(f"{webhook.url}/mutate", content=b" " * (5 * 1024 * 1024))
    assert huge.status_code == 413


def test_plain_http_gets_no_answer(webhook: Running) -> None:
    with pytest.raises(httpx.HTTPError):
        httpx.post(f"{webhook.url.replace('https', 'http')}/mutate", json={}, timeout=5)
    # ... and the server still serves others afterwards.
    assert webhook.client.get(f"{webhook.url}/healthz").text == "ok"


def test_a_client_that_never_says_hello_holds_up_no_one(webhook: Running) -> None:
    host, port = webhook.server.server_address[:2]
    with socket.create_connection((host, port), timeout=5):
        assert webhook.client.get(f"{webhook.url}/healthz").text == "ok"


def test_a_configuration_change_applies_to_the_next_request(webhook: Running) -> None:
    body = review(pod(), username="oidc:erin")
    assert webhook.post(body).json()["response"]["allowed"] is False
    text = webhook.config.read_text().replace(
        "  alice: {uid: 10001, gid: 20001}", "  alice: {uid: 10001, gid: 20001}\n"
        "  erin: {uid: 10020, gid: 20020}"
    )  # fmt: skip
    webhook.config.write_text(text)
    answer = webhook.post(body).json()
    assert patched(body, answer)["spec"]["securityContext"]["runAsUser"] == 10020
    webhook.config.write_text("teams: [broken")  # the last good configuration stays
    assert webhook.post(body).json()["response"]["allowed"] is True


def test_a_rotated_certificate_is_served_to_new_connections(webhook: Running) -> None:
    def served_serial() -> int:
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        host, port = webhook.server.server_address[:2]
        with (
            socket.create_connection((host, port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="localhost") as tls,
        ):
            der = tls.getpeercert(binary_form=True)
        from cryptography import x509

        return int(x509.load_der_x509_certificate(der).serial_number)

    _, _, new_serial = self_signed(webhook.cert.parent, "rotated")
    before = served_serial()
    os.replace(webhook.cert.parent / "rotated.key", webhook.key)
    os.replace(webhook.cert.parent / "rotated.crt", webhook.cert)
    assert before != new_serial
    assert served_serial() == new_serial


def test_the_cli_serves_and_refuses_bad_certificates(tmp_path: Path) -> None:
    cert, key, _ = self_signed(tmp_path)
    command = [sys.executable, "-m", "gpupool", "webhook", "serve", "-c", str(DEMO),
               "--host", "127.0.0.1", "--port", "0"]  # fmt: skip
    refused = subprocess.run(
        [*command, "--cert", str(key), "--key", str(key)], capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert refused.returncode == 5
    assert "--cert/--key: not a PEM certificate and its key" in refused.stderr
    invalid = [*command, "--cert", str(cert), "--key", str(key)]
    invalid[invalid.index(str(DEMO))] = str(ROOT / "examples" / "invalid.yaml")
    refused = subprocess.run(invalid, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 5
    assert "unknown cohort 'reserch'" in refused.stderr
    with subprocess.Popen(
        [*command, "--cert", str(cert), "--key", str(key)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("gpupool webhook on https://127.0.0.1:"), line
            url = line.split()[-1].removesuffix("/mutate")
            context = ssl.create_default_context(cafile=str(cert))
            body = review(pod(), username="alice")
            answer = httpx.post(f"{url}/mutate", json=body, verify=context, timeout=10).json()
            assert patched(body, answer)["spec"]["securityContext"]["runAsUser"] == 10001
        finally:
            process.terminate()
            _, stderr = process.communicate(timeout=10)
    assert "CREATE pods team-a/train-1 by 'alice': allowed" in stderr
