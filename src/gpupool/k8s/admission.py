"""The POSIX-identity admission decision: an AdmissionReview (v1) in, its response out.

Pure: :func:`review` reads the request and asks an :class:`IdentityLookup` for the user's
identity; it does no I/O and keeps no state, so a dry run, a retry or a reinvocation gets the
same answer. ``webhook_server`` is the HTTPS transport around it.

Rules, for Pods and for the pod templates of batch/v1 Jobs and CronJobs in team namespaces:

* CREATE by a gpupool user (``userInfo.username``, less the API server's username prefix, looked
  up in ``users:`` of the configuration, then the directory file): the pod runs as that user.
  ``runAsUser``/``runAsGroup`` become the user's uid and gid, ``fsGroup`` the gid (unless the
  pod chose another of the user's groups), ``supplementalGroups`` the user's groups plus the
  team's gid, and ``supplementalGroupsPolicy`` ``Strict`` (:class:`WebhookPolicy`); a pod
  that asks for another uid or gid, for groups the user is not in, or for root (uid or gid 0,
  at pod or container level) is denied, and so is a user whose own identity is root.
* CREATE by a *delegate* (a controller such as Kubernetes' Job and CronJob controllers, or
  gpupool's own service account, named by the operator): the delegate creates objects on behalf
  of someone whose identity was stamped earlier (on the Job or CronJob, by this webhook, or by
  gpupool), so the object is only required to name a non-root uid and gid; nothing is changed.
  This holds as long as every kind whose template a delegate copies is stamped here: the
  exported Roles let users create no other workload kinds, and the pods of any other
  controller (a Deployment's) come from a user that is not a delegate, so they are denied.
* CREATE by anyone else: denied, naming the user (fail closed).
* UPDATE: the identity fields are immutable once created; the update is allowed unchanged if it
  leaves them as they were and denied otherwise.
* Namespaces that are not team namespaces, other kinds, subresources, DELETE and CONNECT: allowed
  unchanged.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpupool.auth.posix import PosixId

Obj = dict[str, Any]
API_VERSION = "admission.k8s.io/v1"
IDENTITY_FIELDS = ("runAsUser", "runAsGroup", "fsGroup", "supplementalGroups")
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
# (group, version, resource) -> where the pod spec is in the object, as a JSON pointer
POD_SPECS = {
    ("", "v1", "pods"): "/spec",
    ("batch", "v1", "jobs"): "/spec/template/spec",
    ("batch", "v1", "cronjobs"): "/spec/jobTemplate/spec/template/spec",
}


class IdentityLookup(Protocol):
    def identity_of(self, user: str) -> PosixId | None: ...


class MalformedReview(ValueError):
    """Not an AdmissionReview v1 request; the message says what is missing."""


@dataclass(frozen=True)
class WebhookPolicy:
    team_gids: Mapping[str, int | None]  # team namespace -> the team's gid (None: it has none)
    username_prefix: str = ""  # the API server's --oidc-username-prefix
    delegates: frozenset[str] = frozenset()  # usernames trusted to create pods for others
    # Stamped as supplementalGroupsPolicy: Strict keeps the groups an image's /etc/group gives
    # the uid out of the pod (a crafted image could otherwise join another team's group).
    # None: the field is left alone, for nodes whose runtime does not support it.
    groups_policy: str | None = "Strict"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    message: str  # why, for the log and (when denied) for whoever created the pod
    patch: list[Obj] = field(default_factory=list)
    uid: int | None = None  # the identity stamped or checked, for the audit log


# --- reading the request ----------------------------------------------------------------


def _request(review: object) -> Obj:
    if not isinstance(review, dict):
        raise MalformedReview("expected a JSON object")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise MalformedReview(f"expected apiVersion {API_VERSION} and kind AdmissionReview")
    request = review.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str):
        raise MalformedReview("request.uid is missing")
    return request


def _at(obj: object, pointer: str) -> Any:
    for part in pointer.strip("/").split("/"):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _containers(spec: Obj) -> Iterator[tuple[str, Obj]]:
    for kind in CONTAINER_LISTS:
        for container in spec.get(kind) or []:
            if isinstance(container, dict):
                yield f"{kind[:-1]} {container.get('name', '?')!r}", container


def _identity_fields(spec: Obj) -> tuple[object, ...]:
    """Everything of the spec that names an identity, to compare an update with the original."""
    pod = spec.get("securityContext") or {}
    per_container = tuple(
        (where, (c.get("securityContext") or {}).get("runAsUser"),
         (c.get("securityContext") or {}).get("runAsGroup"))
        for where, c in _containers(spec)
    )  # fmt: skip
    return tuple(pod.get(f) for f in IDENTITY_FIELDS) + per_container


# --- the rules ----------------------------------------------------------------------------


def _conflicts(
    spec: Obj, want: PosixId, groups: list[int], groups_policy: str | None
) -> str | None:
    """Why the spec's own identity settings cannot stand beside ``want`` (None: they can)."""
    pod = spec.get("securityContext") or {}
    chosen = pod.get("supplementalGroupsPolicy")
    if groups_policy is not None and chosen is not None and chosen != groups_policy:
        return (
            f"securityContext.supplementalGroupsPolicy is {chosen!r}, which would add the groups "
            f"of the image's /etc/group; it must be {groups_policy!r}"
        )
    for name, value in (("runAsUser", want.uid), ("runAsGroup", want.gid)):
        if name in pod and pod[name] != value:
            return f"securityContext.{name} is {pod[name]!r}, but this user's is {value}"
    if "fsGroup" in pod and pod["fsGroup"] not in (want.gid, *groups):
        return f"securityContext.fsGroup is {pod['fsGroup']!r}, a group this user is not in"
    extra = sorted(set(pod.get("supplementalGroups") or []) - set(groups))
    if extra:
        return f"securityContext.supplementalGroups asks for {extra}, groups this user is not in"
    for where, container in _containers(spec):
        own = container.get("securityContext") or {}
        for name, value in (("runAsUser", want.uid), ("runAsGroup", want.gid)):
            if name in own and own[name] != value:
                return (
                    f"{where}: securityContext.{name} is {own[name]!r}, but this user's is {value}"
                )
    return None


def _patch(spec: Obj, base: str, want: Obj) -> list[Obj]:
    pod = spec.get("securityContext")
    if not isinstance(pod, dict):
        return [{"op": "add", "path": f"{base}/securityContext", "value": want}]
    ops = []
    for name, value in want.items():
        if name not in pod:
            ops.append({"op": "add", "path": f"{base}/securityContext/{name}", "value": value})
        elif pod[name] != value:
            ops.append({"op": "replace", "path": f"{base}/securityContext/{name}", "value": value})
    return ops


def _root_in(spec: Obj) -> str | None:
    pod = spec.get("securityContext") or {}
    for name in ("runAsUser", "runAsGroup"):
        if pod.get(name, None) == 0:
            return f"securityContext.{name} is 0 (root)"
    for where, container in _containers(spec):
        own = container.get("securityContext") or {}
        for name in ("runAsUser", "runAsGroup"):
            if own.get(name, None) == 0:
                return f"{where}: securityContext.{name} is 0 (root)"
    return None


def _stamp(
    spec: Obj, base: str, user: str, identity: PosixId, team_gid: int | None, policy: WebhookPolicy
) -> Decision:
    if identity.uid == 0 or identity.gid == 0:
        return Decision(False, f"user {user!r} has a root identity; pods may not run as root")
    groups = list(dict.fromkeys([*identity.groups, *([team_gid] if team_gid else [])]))
    root = _root_in(spec)
    if root is not None:
        return Decision(False, f"{root}; pods in team namespaces may not run as root")
    conflict = _conflicts(spec, identity, groups, policy.groups_policy)
    if conflict is not None:
        return Decision(False, f"{conflict}; pods run as their creator {user!r}: remove the field")
    chosen = (spec.get("securityContext") or {}).get("fsGroup")  # checked by _conflicts
    want: Obj = {
        "runAsUser": identity.uid,
        "runAsGroup": identity.gid,
        "fsGroup": identity.gid if chosen is None else chosen,
    }
    if groups:
        want["supplementalGroups"] = groups
    if policy.groups_policy is not None:
        want["supplementalGroupsPolicy"] = policy.groups_policy
    patch = _patch(spec, base, want)
    return Decision(True, f"runs as {user!r} (uid {identity.uid})", patch, identity.uid)


def _delegated(spec: Obj, user: str) -> Decision:
    pod = spec.get("securityContext") or {}
    root = _root_in(spec)
    if root is not None:
        return Decision(False, f"{root}; pods in team namespaces may not run as root")
    if not isinstance(pod.get("runAsUser"), int) or not isinstance(pod.get("runAsGroup"), int):
        return Decision(
            False,
            f"{user!r} creates pods for others, so the pod must already name its user's "
            "securityContext.runAsUser and runAsGroup (stamped on the Job when it was created)",
        )
    return Decision(
        True, f"created by delegate {user!r} as uid {pod['runAsUser']}", [], pod["runAsUser"]
    )


def decide(request: Obj, policy: WebhookPolicy, lookup: IdentityLookup) -> Decision:
    namespace = request.get("namespace") or ""
    if namespace not in policy.team_gids:
        return Decision(True, f"namespace {namespace!r} is not a team namespace")
    resource = request.get("resource") or {}
    key = (resource.get("group", ""), resource.get("version", ""), resource.get("resource", ""))
    base = POD_SPECS.get(key)
    operation = request.get("operation")
    if base is None or request.get("subResource") or operation not in ("CREATE", "UPDATE"):
        return Decision(True, f"{operation} of {'/'.join(k for k in key if k)} is not checked")
    spec = _at(request.get("object"), base)
    if not isinstance(spec, dict):
        return Decision(False, f"the object has no pod spec at {base}")
    if operation == "UPDATE":
        old = _at(request.get("oldObject"), base)
        if isinstance(old, dict) and _identity_fields(old) == _identity_fields(spec):
            return Decision(True, "update leaves the identity as it was")
        return Decision(False, "the POSIX identity of a pod cannot change after it is created")
    username = str((request.get("userInfo") or {}).get("username") or "")
    if username in policy.delegates:
        return _delegated(spec, username)
    prefix = policy.username_prefix
    user = username[len(prefix) :] if username.startswith(prefix) else ""
    identity = lookup.identity_of(user) if user else None
    if identity is None:
        return Decision(
            False,
            f"user {username!r} has no POSIX identity in gpupool (users: of the configuration or "
            "the directory file), and pods in team namespaces run as their creator; add the user "
            "there, or create the pod as a gpupool user",
        )
    return _stamp(spec, base, user, identity, policy.team_gids[namespace], policy)


def review(body: object, policy: WebhookPolicy, lookup: IdentityLookup) -> tuple[Obj, Decision]:
    """The AdmissionReview response to ``body``, and the decision for the log.
    Raises :class:`MalformedReview` for a body that is not a v1 AdmissionReview request."""
    request = _request(body)
    decision = decide(request, policy, lookup)
    response: Obj = {"uid": request["uid"], "allowed": decision.allowed}
    if not decision.allowed:
        response["status"] = {"code": 403, "reason": "Forbidden", "message": decision.message}
    elif decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(decision.patch).encode()).decode("ascii")
    if decision.allowed and decision.uid is not None:
        response["auditAnnotations"] = {"uid": str(decision.uid)}
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}, decision
