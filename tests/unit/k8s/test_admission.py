"""The admission decision (``gpupool.k8s.admission``) on AdmissionReview requests as the API
server sends them: each returned JSONPatch is applied to the object, and the result is checked
field by field and against the Kubernetes schema."""

from __future__ import annotations

import base64
import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from gpupool.auth.directory import Directory
from gpupool.auth.posix import PosixId
from gpupool.k8s.admission import MalformedReview, WebhookPolicy, review
from gpupool.k8s.identities import ConfiguredIdentities, policy_for
from gpupool.spec.load import load_config
from support.admission_reviews import container, cronjob, job, pod, without_nulls
from support.admission_reviews import review as request_for
from support.k8s_schemas import problems

ROOT = Path(__file__).resolve().parents[3]
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
POLICY = WebhookPolicy(
    team_gids={"team-a": 30001, "team-c": None}, delegates=frozenset({JOB_CONTROLLER})
)
ALICE = {
    "runAsUser": 10001,
    "runAsGroup": 20001,
    "fsGroup": 20001,
    "supplementalGroups": [40001, 30001],
    "supplementalGroupsPolicy": "Strict",
}  # fmt: skip


class Identities:
    def __init__(self, known: dict[str, PosixId]) -> None:
        self.known = known

    def identity_of(self, user: str) -> PosixId | None:
        return self.known.get(user)


LOOKUP = Identities({
    "alice": PosixId(10001, 20001, (40001,)),
    "bob": PosixId(10002, 20002),
    "toor": PosixId(0, 0),
})  # fmt: skip


@dataclass(frozen=True)
class Case:
    request: dict[str, Any]
    allowed: bool
    security: dict[str, Any] | None = None  # the pod securityContext after the patch
    message: str = ""  # in the denial's message
    patched: bool = True  # whether a patch is expected when allowed
    policy: WebhookPolicy = POLICY


def spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"] if obj["kind"] == "Job" else obj["spec"]


CASES = [
    pytest.param(Case(request_for(pod()), True, ALICE), id="a user's pod runs as the user"),
    pytest.param(Case(request_for(pod(name=None)), True, ALICE), id="a generated name"),
    pytest.param(Case(request_for(job()), True, ALICE), id="a Job's pod template is stamped"),
    pytest.param(
        Case(request_for(pod(), dry_run=True), True, ALICE), id="a dry run gets the same answer"
    ),
    pytest.param(Case(request_for(cronjob()), True, ALICE), id="a CronJob's template is stamped"),
    pytest.param(
        Case(
            request_for(pod(security={"supplementalGroupsPolicy": "Merge"})),
            False,
            message="supplementalGroupsPolicy is 'Merge', which would add the groups",
        ),
        id="groups from the image's /etc/group are denied",
    ),
    pytest.param(
        Case(
            request_for(pod(security={"supplementalGroupsPolicy": "Merge"})),
            True,
            {
                **{k: v for k, v in ALICE.items() if k != "supplementalGroupsPolicy"},
                "supplementalGroupsPolicy": "Merge",
            },
            policy=WebhookPolicy(POLICY.team_gids, groups_policy=None),
        ),
        id="without a groups policy the pod's own stands",
    ),
    pytest.param(
        Case(
            request_for(pod(namespace="team-c"), username="bob"),
            True,
            {
                "runAsUser": 10002,
                "runAsGroup": 20002,
                "fsGroup": 20002,
                "supplementalGroupsPolicy": "Strict",
            },
        ),
        id="a team without a gid and a user without groups",
    ),
    pytest.param(
        Case(
            request_for(pod(security=None) | {"spec": {"containers": [container()]}}), True, ALICE
        ),
        id="no securityContext at all: added whole",
    ),
    pytest.param(
        Case(
            request_for(
                pod(
                    security={
                        "runAsUser": 10001,
                        "runAsNonRoot": True,
                        "supplementalGroups": [30001],
                    }
                )
            ),
            True,
            {**ALICE, "runAsNonRoot": True},
        ),
        id="the pod's own matching settings are kept and completed",
    ),
    pytest.param(
        Case(request_for(pod(security={"fsGroup": 30001})), True, {**ALICE, "fsGroup": 30001}),
        id="fsGroup of the team's group is the pod's choice",
    ),
    pytest.param(
        Case(request_for(pod(security=ALICE)), True, ALICE, patched=False),
        id="already stamped (a reinvocation): nothing to patch",
    ),
    pytest.param(
        Case(
            request_for(pod(security={"runAsUser": 10002})),
            False,
            message="securityContext.runAsUser is 10002, but this user's is 10001",
        ),
        id="another uid is denied",
    ),
    pytest.param(
        Case(
            request_for(pod(security={"runAsGroup": 20002})),
            False,
            message="securityContext.runAsGroup is 20002",
        ),
        id="another gid is denied",
    ),
    pytest.param(
        Case(
            request_for(pod(security={"supplementalGroups": [30002]})),
            False,
            message="asks for [30002], groups this user is not in",
        ),
        id="a group the user is not in is denied",
    ),
    pytest.param(
        Case(
            request_for(pod(security={"fsGroup": 30002})),
            False,
            message="fsGroup is 30002, a group this user is not in",
        ),
        id="an fsGroup the user is not in is denied",
    ),
    pytest.param(
        Case(
            request_for(pod(security={"runAsUser": 0})),
            False,
            message="securityContext.runAsUser is 0 (root)",
        ),
        id="root at pod level is denied",
    ),
    pytest.param(
        Case(
            request_for(pod(containers=[container("init", {"runAsGroup": 0})])),
            False,
            message="container 'init': securityContext.runAsGroup is 0 (root)",
        ),
        id="root in a container is denied",
    ),
    pytest.param(
        Case(
            request_for(pod(containers=[container("side", {"runAsUser": 10002})])),
            False,
            message="container 'side': securityContext.runAsUser is 10002",
        ),
        id="another uid in a container is denied",
    ),
    pytest.param(
        Case(request_for(pod(), username="toor"), False, message="'toor' has a root identity"),
        id="a user whose own identity is root is denied",
    ),
    pytest.param(
        Case(
            request_for(pod(), username="mallory"),
            False,
            message="user 'mallory' has no POSIX identity in gpupool",
        ),
        id="an unknown user is denied (fail closed)",
    ),
    pytest.param(
        Case(
            request_for(pod(), username="oidc:alice"),
            True,
            ALICE,
            policy=WebhookPolicy(POLICY.team_gids, username_prefix="oidc:"),
        ),
        id="the API server's username prefix is removed",
    ),
    pytest.param(
        Case(
            request_for(pod(), username="alice"),
            False,
            message="user 'alice' has no POSIX",
            policy=WebhookPolicy(POLICY.team_gids, username_prefix="oidc:"),
        ),
        id="a name without the prefix is not a gpupool user",
    ),
    pytest.param(
        Case(request_for(pod(security=ALICE), username=JOB_CONTROLLER), True, ALICE, patched=False),
        id="the Job controller's pod of a stamped Job",
    ),
    pytest.param(
        Case(
            request_for(pod(), username=JOB_CONTROLLER),
            False,
            message="must already name its user's securityContext.runAsUser",
        ),
        id="the Job controller's pod without an identity is denied",
    ),
    pytest.param(
        Case(
            request_for(pod(security={"runAsUser": 0, "runAsGroup": 0}), username=JOB_CONTROLLER),
            False,
            message="runAsUser is 0 (root)",
        ),
        id="a delegate's root pod is denied",
    ),
    pytest.param(
        Case(
            request_for(pod(namespace="kube-system"), username="system:node:n1"),
            True,
            patched=False,
        ),
        id="a namespace that is not a team's is ignored",
    ),
    pytest.param(
        Case(
            request_for(
                pod(security=ALICE),
                "UPDATE",
                username="system:serviceaccount:x:y",
                old=pod(security=ALICE),
            ),
            True,
            patched=False,
        ),
        id="an update that keeps the identity",
    ),
    pytest.param(
        Case(
            request_for(
                pod(security={**ALICE, "runAsUser": 10002}), "UPDATE", old=pod(security=ALICE)
            ),
            False,
            message="cannot change",
        ),
        id="an update that changes the identity is denied",
    ),
    pytest.param(
        Case(
            request_for(job(security=ALICE), "UPDATE", old=job(security=ALICE)), True, patched=False
        ),
        id="a Job update (resume) that keeps the identity",
    ),
    pytest.param(
        Case(request_for(pod(), "DELETE", username="mallory"), True, patched=False),
        id="a delete is not checked",
    ),
    pytest.param(
        Case(
            request_for(
                pod(security=ALICE),
                "UPDATE",
                sub_resource="status",
                username="system:node:n1",
                old=pod(),
            ),
            True,
            patched=False,
        ),
        id="a subresource is not checked",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_review(case: Case) -> None:
    body = case.request
    request = body["request"]
    answer, _ = review(copy.deepcopy(body), case.policy, LOOKUP)
    response = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert response["uid"] == request["uid"]
    assert response["allowed"] is case.allowed
    if not case.allowed:
        assert response["status"]["code"] == 403
        assert case.message in response["status"]["message"]
        assert "patch" not in response
        return
    assert ("patch" in response) is case.patched
    if request["object"] is None:
        return
    patched = request["object"]
    if case.patched:
        assert response["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(response["patch"]))
        patched = jsonpatch.apply_patch(request["object"], ops)
        assert problems(without_nulls(patched)) == []
        # Nothing but the securityContext changes.
        rest, before = copy.deepcopy(patched), copy.deepcopy(request["object"])
        spec_of(rest).pop("securityContext")
        spec_of(before).pop("securityContext", None)
        assert rest == before
    if case.security is not None:
        assert spec_of(patched)["securityContext"] == case.security


def test_dry_run_and_real_answer_alike() -> None:
    wet = request_for(pod())
    dry = copy.deepcopy(wet)
    dry["request"]["dryRun"] = True
    assert review(wet, POLICY, LOOKUP)[0] == review(dry, POLICY, LOOKUP)[0]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param([], "expected a JSON object", id="not an object"),
        pytest.param(
            {
                "apiVersion": "admission.k8s.io/v1beta1",
                "kind": "AdmissionReview",
                "request": {"uid": "x"},
            },
            "admission.k8s.io/v1",
            id="v1beta1",
        ),
        pytest.param(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"},
            "request.uid is missing",
            id="no request",
        ),
    ],
)
def test_malformed_reviews_are_refused(body: object, message: str) -> None:
    with pytest.raises(MalformedReview, match=message):
        review(body, POLICY, LOOKUP)


def test_identities_come_from_the_configuration_then_the_directory(tmp_path: Path) -> None:
    config = load_config(ROOT / "examples" / "demo.yaml")
    directory = tmp_path / "directory.yaml"
    directory.write_text(
        "groups: {TeamA: [dave]}\n"
        "users:\n  dave: {uid: 10010, gid: 10010, groups: [40002]}\n"
        "  alice: {uid: 19999, gid: 19999}\n"
    )
    lookup = ConfiguredIdentities(lambda: config, Directory(directory))
    assert lookup.identity_of("alice") == PosixId(10001, 20001)  # users: wins
    assert lookup.identity_of("dave") == PosixId(10010, 10010, (40002,))
    assert lookup.identity_of("nobody") is None
    policy = policy_for(config, "oidc:", frozenset({JOB_CONTROLLER}))
    assert policy.team_gids == {"team-a": 30001, "team-b": 30002, "team-c": 30003}
    answer, _ = review(request_for(pod(), username="oidc:dave"), policy, lookup)
    ops = json.loads(base64.b64decode(answer["response"]["patch"]))
    stamped = jsonpatch.apply_patch(pod(), ops)["spec"]["securityContext"]
    assert stamped == {
        "runAsUser": 10010,
        "runAsGroup": 10010,
        "fsGroup": 10010,
        "supplementalGroups": [40002, 30001],
        "supplementalGroupsPolicy": "Strict",
    }
