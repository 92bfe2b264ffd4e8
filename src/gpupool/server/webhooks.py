"""Webhook delivery (C3): a worker thread that sends the outbox's messages, signed, with retries.

The controller only writes messages to the outbox (``state.budgets``, in the transaction of the
alert); this worker, a thread of the server process that runs the controller, sends them. So a
receiver that is slow or down delays its own messages and nothing else.

Each message is POSTed as its stored JSON body with ``Content-Type: application/json``,
``X-Gpupool-Event`` and ``X-Gpupool-Delivery`` (the message id, the same on every try: a
receiver drops repeats by it) and, when the webhook names ``secret_env``,
``X-Gpupool-Signature: sha256=<hex HMAC-SHA256 of the body with the secret>``. A 2xx answer
delivers it; anything else (another status, a timeout, a refused connection, the secret's
variable unset) is a failed try, retried after ``FIRST_RETRY_S`` doubling up to
``MAX_RETRY_S``, at most ``MAX_TRIES`` tries in all. Every try is logged in
``webhook_deliveries`` (``GET /v1/webhooks/deliveries``); ended messages and tries older than
``KEEP_DAYS`` are pruned once an hour.

Only the process whose controller leads sends (the ``leading`` callable), so two replicas do
not deliver one message at once. Time and the HTTP transport are injected (tests use a fake
clock and a real local receiver).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

import httpx

from gpupool.config import webhook_secret
from gpupool.controller.clock import Clock
from gpupool.spec.models import ClusterConfig
from gpupool.state import budgets as store
from gpupool.state.db import SessionFactory, store_outage

log = logging.getLogger(__name__)

MAX_TRIES = 8
FIRST_RETRY_S = 2.0
MAX_RETRY_S = 300.0
TIMEOUT_S = 5.0
POLL_S = 1.0
KEEP_DAYS = 30  # delivered and failed messages, and the log of tries, are kept this long
PRUNE_EVERY_S = 3600.0
SIGNATURE_HEADER = "X-Gpupool-Signature"


def signature(secret: str, body: bytes) -> str:
    """``sha256=<hex>``: the HMAC-SHA256 of ``body`` keyed with ``secret`` (UTF-8)."""
    digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def retry_after_s(tries: int) -> float:
    """The wait after the ``tries``-th failed try: 2, 4, 8, ... seconds, at most 5 minutes."""
    return float(min(MAX_RETRY_S, FIRST_RETRY_S * 2 ** (tries - 1)))


class WebhookWorker:
    def __init__(
        self,
        sessions: SessionFactory,
        config: Callable[[], ClusterConfig],
        clock: Clock,
        leading: Callable[[], bool] = lambda: True,
        transport: httpx.BaseTransport | None = None,
        secrets: Callable[[str], str | None] = webhook_secret,
        poll_s: float = POLL_S,
    ) -> None:
        self._sessions = sessions
        self._config = config
        self._clock = clock
        self._leading = leading
        self._secrets = secrets
        self._poll_s = poll_s
        self._http = httpx.Client(transport=transport, timeout=TIMEOUT_S, follow_redirects=False)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pruned_at = float("-inf")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpupool-webhooks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=TIMEOUT_S + 5)
        self._http.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self._leading():
                    self.deliver_due()
                    self.prune()
            except Exception as exc:  # keep delivering: one bad pass must not stop the worker
                outage = store_outage(exc)
                if outage is None:
                    log.exception("webhook delivery pass failed")
                else:
                    log.warning("webhook delivery paused: %s", outage.message)
            self._stop.wait(self._poll_s)

    def deliver_due(self) -> int:
        """Try every message due now, one at a time; how many were tried."""
        now = self._clock.now()
        with self._sessions() as session:
            due = [(m.id, m.webhook, m.event, m.body, m.tries) for m in store.due(session, now)]
        for message_id, webhook, event, body, tries in due:
            if self._stop.is_set():
                break
            outcome = self._send(message_id, webhook, event, body.encode("utf-8"), tries + 1)
            with self._sessions.begin() as session:
                store.record_try(session, message_id, outcome)
        return len(due)

    def prune(self) -> int:
        """At most every ``PRUNE_EVERY_S``: forget what ended ``KEEP_DAYS`` ago."""
        stamp = self._clock.monotonic()
        if stamp - self._pruned_at < PRUNE_EVERY_S:
            return 0
        self._pruned_at = stamp
        with self._sessions.begin() as session:
            return store.prune(session, self._clock.now() - timedelta(days=KEEP_DAYS))

    def _send(
        self, message_id: int, webhook: str, event: str, body: bytes, number: int
    ) -> store.Try:
        hook = next((h for h in self._config().accounting.webhooks if h.name == webhook), None)
        if hook is None:
            return self._outcome(
                number, None, f"webhook {webhook!r} is no longer configured", 0.0, final=True
            )
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "gpupool-webhooks",
            "X-Gpupool-Event": event,
            "X-Gpupool-Delivery": str(message_id),
        }
        if hook.secret_env is not None:
            secret = self._secrets(hook.secret_env)
            if not secret:
                why = f"environment variable {hook.secret_env} (secret_env) is not set"
                return self._outcome(number, None, why, 0.0)
            headers[SIGNATURE_HEADER] = signature(secret, body)
        started = time.perf_counter()
        try:
            # Only the status is read: a receiver's body, however long or slow, is never
            # taken in (closing the stream drops the connection).
            with self._http.stream("POST", hook.url, content=body, headers=headers) as response:
                status = response.status_code
        except httpx.HTTPError as exc:
            took = (time.perf_counter() - started) * 1000
            return self._outcome(number, None, f"{type(exc).__name__}: {exc}", took)
        took = (time.perf_counter() - started) * 1000
        if 200 <= status < 300:
            return store.Try(store.DELIVERED, self._clock.now(), status, "", took)
        return self._outcome(number, status, f"HTTP {status}", took)

    def _outcome(
        self, number: int, status: int | None, error: str, took: float, *, final: bool = False
    ) -> store.Try:
        """A failed try: due again after the backoff, or failed for good."""
        now = self._clock.now()
        if final or number >= MAX_TRIES:
            return store.Try(store.FAILED, now, status, error, took)
        later = now + timedelta(seconds=retry_after_s(number))
        return store.Try(store.RETRY, now, status, error, took, later)
