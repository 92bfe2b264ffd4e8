"""``gpupool webhook serve``: the HTTPS transport of the admission decision (``admission``).

The API server POSTs an AdmissionReview to ``/mutate`` and reads the one this returns;
``/healthz`` answers ``ok`` for probes. The rest is kept small on purpose:

* TLS only, 1.2 or later; the certificate and key are re-read when their files change, so a
  rotated certificate (cert-manager, a mounted Secret) is served without a restart. The TLS
  handshake runs in the connection's thread, so a slow client holds up no one else.
* The configuration file (users, teams and their gids) and the directory file are re-read when
  they change; a configuration that no longer validates is logged and the last good one kept.
* Bodies over :data:`MAX_BODY` and requests slower than :data:`TIMEOUT_S` are cut off. A body
  that is not an AdmissionReview gets a 400 naming what is missing; every decision is logged
  with its user, namespace and outcome (never the object, which may hold secrets).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from gpupool.auth.directory import Directory
from gpupool.core.errors import ConfigInvalid
from gpupool.k8s.admission import MalformedReview, WebhookPolicy, review
from gpupool.k8s.export import WEBHOOK_PATH
from gpupool.k8s.identities import ConfiguredIdentities, policy_for
from gpupool.spec.load import load_config
from gpupool.spec.models import ClusterConfig

log = logging.getLogger(__name__)
MAX_BODY = 4 * 1024 * 1024  # an AdmissionReview holds the object twice; objects stay under 1.5 MB
TIMEOUT_S = 10.0


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


class ConfigFile:
    """The cluster configuration, re-read when the file changes; the last good one is kept."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._config = load_config(path)  # a bad file at start is an error, not a fallback
        self._stamp = _stamp(path)

    def __call__(self) -> ClusterConfig:
        stamp = _stamp(self._path)
        with self._lock:
            if stamp is not None and stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._config = load_config(self._path)
                    log.info("configuration %s re-read", self._path)
                except ConfigInvalid as exc:
                    log.error("configuration %s: %s; the last good one stays", self._path, exc)
            return self._config


class Webhook:
    """What the handler calls: the policy and identities of the current configuration."""

    def __init__(
        self,
        config: Callable[[], ClusterConfig],
        directory: Directory | None = None,
        username_prefix: str = "",
        delegates: frozenset[str] = frozenset(),
        groups_policy: str | None = "Strict",
    ) -> None:
        self._config = config
        self._lookup = ConfiguredIdentities(config, directory)
        self._prefix = username_prefix
        self._delegates = delegates
        self._groups_policy = groups_policy

    def policy(self) -> WebhookPolicy:
        return policy_for(self._config(), self._prefix, self._delegates, self._groups_policy)

    def handle(self, body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            parsed = json.loads(body)
            response, decision = review(parsed, self.policy(), self._lookup)
        except (ValueError, MalformedReview) as exc:
            message = str(exc) if isinstance(exc, MalformedReview) else "the body is not JSON"
            return 400, {"error": f"not an AdmissionReview v1 request: {message}"}
        request = parsed["request"]
        log.info(
            "%s %s %s/%s by %r%s: %s, %s",
            request.get("operation"),
            (request.get("resource") or {}).get("resource"),
            request.get("namespace"),
            request.get("name") or "(generated)",
            (request.get("userInfo") or {}).get("username"),
            " (dry run)" if request.get("dryRun") else "",
            "allowed" if decision.allowed else "denied",
            decision.message,
        )
        return 200, response


class _Handler(BaseHTTPRequestHandler):
    server: WebhookServer
    timeout = TIMEOUT_S
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        self.request.settimeout(self.timeout)
        self.request.do_handshake()  # here, in this connection's thread
        super().setup()

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._reply(200, b"ok", "text/plain")
        else:
            self._reply(404, b'{"error": "not found"}')

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True  # where the body ends is unknown
            self._reply(411, b'{"error": "Content-Length is required"}')
            return
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True  # not worth reading
            self._reply(413, b'{"error": "the body is too large"}')
            return
        body = self.rfile.read(length)  # read even when unused: the connection is kept alive
        if self.path.split("?")[0] != WEBHOOK_PATH:
            self._reply(404, b'{"error": "not found"}')
            return
        status, reply = self.server.webhook.handle(body)
        self._reply(status, json.dumps(reply).encode())

    def _reply(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)


class WebhookServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], webhook: Webhook, certfile: Path, keyfile: Path
    ) -> None:
        self.webhook = webhook
        self._certfile, self._keyfile = certfile, keyfile
        self._cert_stamp: tuple[object, object] | None = None
        self._context = self._load_context()
        super().__init__(address, _Handler)

    def _load_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self._certfile, self._keyfile)
        self._cert_stamp = (_stamp(self._certfile), _stamp(self._keyfile))
        return context

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        if (_stamp(self._certfile), _stamp(self._keyfile)) != self._cert_stamp:
            try:
                self._context = self._load_context()
                log.info("certificate %s re-read", self._certfile)
            except (OSError, ssl.SSLError) as exc:  # mid-rotation: keep serving the old one
                log.error(
                    "certificate %s cannot be loaded, the old one stays: %s", self._certfile, exc
                )
        wrapped = self._context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return wrapped, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A failed handshake or a client that went away: one line, no traceback.
        log.warning("connection from %s failed", client_address[0] if client_address else "?")


def make_server(
    webhook: Webhook, host: str, port: int, certfile: Path, keyfile: Path
) -> WebhookServer:
    for name, path in (("--cert", certfile), ("--key", keyfile)):
        if not os.access(path, os.R_OK):
            raise ConfigInvalid(f"{name}: cannot read {path}")
    try:
        return WebhookServer((host, port), webhook, certfile, keyfile)
    except ssl.SSLError as exc:
        raise ConfigInvalid(
            f"--cert/--key: not a PEM certificate and its key ({exc.reason})"
        ) from None
