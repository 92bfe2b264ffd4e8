"""``map_kubernetes_errors``: what the official client raises, translated at the boundary into
a retryable or final backend error (the table in ``kubernetes/errors.py``)."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException, ApiValueError
from kubernetes.config.config_exception import ConfigException

from gpupool.backends.errors import (
    BackendError,
    BackendMisconfigured,
    BackendRejected,
    BackendUnavailable,
)
from gpupool.backends.kubernetes.errors import (
    is_already_exists,
    is_not_found,
    map_kubernetes_errors,
)


def api_error(status: int, reason: str, message: str, kind: str = "") -> ApiException:
    exc = ApiException(status=status, reason=reason)
    body = {"kind": "Status", "status": "Failure", "message": message, "code": status}
    if kind:
        body["reason"] = kind
    exc.body = json.dumps(body)
    return exc


def unreachable() -> Exception:
    cause = urllib3.exceptions.NewConnectionError(None, "Failed to establish a new connection")  # type: ignore[arg-type]
    return urllib3.exceptions.MaxRetryError(None, "/apis/batch/v1/jobs", cause)  # type: ignore[arg-type]


def bad_certificate() -> Exception:
    cause = ssl.SSLError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    wrapped = urllib3.exceptions.SSLError(cause)
    return urllib3.exceptions.MaxRetryError(None, "/api/v1/nodes", wrapped)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    raised: Exception
    want: type[BackendError]
    says: str


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            Case(
                api_error(500, "Internal Server Error", "etcdserver: request timed out"),
                BackendUnavailable,
                "now: HTTP 500 Internal Server Error: etcdserver",
            ),
            id="500: retry",
        ),
        pytest.param(
            Case(
                api_error(503, "Service Unavailable", "the server is shutting down"),
                BackendUnavailable,
                "HTTP 503",
            ),
            id="503: retry",
        ),
        pytest.param(
            Case(
                api_error(429, "Too Many Requests", "rate limited"), BackendUnavailable, "HTTP 429"
            ),
            id="429: retry",
        ),
        pytest.param(
            Case(
                api_error(409, "Conflict", "the object has been modified", "Conflict"),
                BackendUnavailable,
                "modified",
            ),
            id="409 conflict: retry",
        ),
        pytest.param(
            Case(
                api_error(
                    403,
                    "Forbidden",
                    'jobs.batch "x" is forbidden: exceeded quota: gpu, requested: nvidia.com/gpu=2',
                ),
                BackendUnavailable,
                "exceeded quota",
            ),
            id="403 quota: retry later",
        ),
        pytest.param(
            Case(
                api_error(
                    403,
                    "Forbidden",
                    'jobs.batch is forbidden: User "system:'
                    'serviceaccount:gpupool:controller" cannot create resource',
                ),
                BackendMisconfigured,
                "cannot create resource",
            ),
            id="403 RBAC",
        ),
        pytest.param(
            Case(api_error(401, "Unauthorized", "Unauthorized"), BackendMisconfigured, "HTTP 401"),
            id="401: credentials",
        ),
        pytest.param(
            Case(
                api_error(404, "Not Found", 'namespaces "team-z" not found'),
                BackendMisconfigured,
                "team-z",
            ),
            id="404 namespace missing",
        ),
        pytest.param(
            Case(
                api_error(422, "Unprocessable Entity", 'Job.batch "x" is invalid'),
                BackendRejected,
                "is invalid",
            ),
            id="422: the Job is refused",
        ),
        pytest.param(
            Case(api_error(400, "Bad Request", "bad request"), BackendRejected, "HTTP 400"),
            id="400: the Job is refused",
        ),
        pytest.param(Case(unreachable(), BackendUnavailable, "now:"), id="unreachable: retry"),
        pytest.param(
            Case(
                urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"),  # type: ignore[arg-type]
                BackendUnavailable,
                "timed out",
            ),
            id="timeout: retry",
        ),
        pytest.param(
            Case(bad_certificate(), BackendMisconfigured, "CERTIFICATE_VERIFY_FAILED"),
            id="TLS check failed: the CA is wrong",
        ),
        pytest.param(
            Case(
                ConfigException("Invalid kube-config file. No configuration found."),
                BackendMisconfigured,
                "kube-config",
            ),
            id="kubeconfig unusable",
        ),
        pytest.param(
            Case(
                ApiValueError("Missing the required parameter `name`"),
                BackendRejected,
                "required parameter",
            ),
            id="refused by the client",
        ),
        pytest.param(
            Case(
                ModuleNotFoundError("No module named 'kubernetes'"),
                BackendMisconfigured,
                "pip install gpupool[kubernetes]",
            ),
            id="client not installed",
        ),
    ],
)
def test_client_errors_are_classified(case: Case) -> None:
    with pytest.raises(case.want) as caught, map_kubernetes_errors("create Job team-a/x"):
        raise case.raised
    assert case.says in str(caught.value)
    assert caught.value.__cause__ is case.raised
    assert "\n" not in str(caught.value)


def test_a_bug_is_not_translated() -> None:
    with pytest.raises(KeyError), map_kubernetes_errors("poll"):
        raise KeyError("status")


def test_backend_errors_pass_through() -> None:
    with pytest.raises(BackendRejected, match="mine"), map_kubernetes_errors("poll"):
        raise BackendRejected("mine")


def test_what_the_adapter_handles_itself_is_recognised() -> None:
    assert is_already_exists(api_error(409, "Conflict", 'jobs "x" already exists', "AlreadyExists"))
    assert not is_already_exists(api_error(409, "Conflict", "modified", "Conflict"))
    assert is_not_found(api_error(404, "Not Found", 'jobs.batch "x" not found', "NotFound"))
    assert not is_not_found(unreachable())
