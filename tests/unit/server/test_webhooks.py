"""The webhook worker against a real HTTP receiver: signed bodies, retries with a capped
backoff, every try logged; a receiver that hangs holds up nothing but its own messages."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from gpupool.server.webhooks import MAX_RETRY_S, MAX_TRIES, WebhookWorker, retry_after_s
from gpupool.spec.models import Accounting, ClusterConfig, GpuType, Webhook
from gpupool.state import budgets as store
from gpupool.state.db import session_factory
from support.receiver import SECRET, Receiver
from support.stores import ManualClock

T0 = datetime(2027, 6, 10, 12, tzinfo=UTC)
BODY = '{"event":"budget.threshold","team":"a","threshold":80.0}'


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    got = Receiver()
    try:
        yield got
    finally:
        got.close()


def config(url: str, secret_env: str | None = "HOOK_SECRET") -> ClusterConfig:
    hook = Webhook(name="ops", url=url, secret_env=secret_env)
    return ClusterConfig(gpu_types={"h100": GpuType()}, accounting=Accounting(webhooks=[hook]))


def worker(engine: Engine, cfg: ClusterConfig, clock: ManualClock, **kw: object) -> WebhookWorker:
    secrets = {"HOOK_SECRET": SECRET}
    return WebhookWorker(session_factory(engine), lambda: cfg, clock, secrets=secrets.get, **kw)  # type: ignore[arg-type]


def enqueue(engine: Engine, at: datetime = T0) -> None:
    with session_factory(engine).begin() as session:
        store.enqueue(session, "ops", "budget.threshold", BODY, at)


def log(engine: Engine) -> list[tuple[int, str, int | None]]:
    with session_factory(engine)() as session:
        rows = store.deliveries(session, limit=100)
    return [(d.try_number, d.outcome, d.status_code) for d in reversed(rows)]


def test_a_message_is_posted_signed_and_logged_as_delivered(
    store_engine: Engine, receiver: Receiver
) -> None:
    enqueue(store_engine)
    sender = worker(store_engine, config(receiver.url), ManualClock(T0))
    try:
        assert sender.deliver_due() == 1
    finally:
        sender.stop()
    ((headers, body, valid),) = receiver.got
    assert body == BODY.encode() and valid
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Gpupool-Event"] == "budget.threshold"
    assert log(store_engine) == [(1, "delivered", 204)]


def test_a_wrong_secret_is_refused_by_the_receiver_and_retried(
    store_engine: Engine, receiver: Receiver
) -> None:
    enqueue(store_engine)
    clock = ManualClock(T0)
    cfg = config(receiver.url)
    sender = WebhookWorker(session_factory(store_engine), lambda: cfg, clock, secrets=lambda _: "x")
    try:
        sender.deliver_due()
    finally:
        sender.stop()
    assert receiver.got[0][2] is False
    assert log(store_engine) == [(1, "retry", 401)]


def test_a_receiver_that_is_down_gets_retries_with_a_doubling_capped_backoff(
    store_engine: Engine,
) -> None:
    down = Receiver()
    url = down.url
    down.close()  # nothing listens there any more: every try is refused
    enqueue(store_engine)
    clock = ManualClock(T0)
    sender = worker(store_engine, config(url), clock)
    waits = []
    try:
        for _ in range(MAX_TRIES):
            assert sender.deliver_due() == 1
            assert sender.deliver_due() == 0  # not due again before its backoff
            with session_factory(store_engine)() as session:
                due_at = store.next_due(session)
            if due_at is None:
                break
            waits.append((due_at - clock.now()).total_seconds())
            clock.advance(waits[-1])
    finally:
        sender.stop()
    assert waits == [retry_after_s(n) for n in range(1, MAX_TRIES)]
    assert waits[:3] == [2.0, 4.0, 8.0] and max(waits) <= MAX_RETRY_S
    outcomes = [outcome for _, outcome, _ in log(store_engine)]
    assert outcomes == ["retry"] * (MAX_TRIES - 1) + ["failed"]


def test_an_unset_secret_variable_is_a_failed_try_that_names_it(store_engine: Engine) -> None:
    enqueue(store_engine)
    cfg = config("http://127.0.0.1:9/never", secret_env="UNSET_SECRET")
    sender = worker(store_engine, cfg, ManualClock(T0))
    try:
        sender.deliver_due()
    finally:
        sender.stop()
    with session_factory(store_engine)() as session:
        (entry,) = store.deliveries(session, limit=10)
    assert entry.outcome == "retry" and "UNSET_SECRET" in entry.error


def test_a_hanging_receiver_blocks_neither_other_threads_nor_the_store(
    store_engine: Engine, receiver: Receiver
) -> None:
    receiver.hang = True
    enqueue(store_engine)
    clock = ManualClock(T0)
    sender = worker(store_engine, config(receiver.url), clock, poll_s=0.02)
    sender.start()
    try:
        assert receiver.entered.wait(5)
        # While the worker waits on the receiver, writers and readers of the store go on.
        for i in range(20):
            enqueue(store_engine, T0 + timedelta(hours=1 + i))
        with session_factory(store_engine)() as session:
            assert len(store.due(session, T0 + timedelta(days=1), limit=100)) == 21
    finally:
        receiver.release.set()
        sender.stop()
    assert log(store_engine)[0] == (1, "delivered", 204)


def test_a_receiver_that_answers_with_an_endless_body_costs_nothing(store_engine: Engine) -> None:
    """A hostile receiver answers 200 and then streams forever: the worker takes the status,
    drops the connection and records the delivery, without reading the body."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    sent = {"bytes": 0}

    def serve() -> None:
        conn, _ = server.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"100000\r\n" + b"x" * 0x100000 + b"\r\n"
        try:
            while sent["bytes"] < 1 << 33:  # 8 GiB: far more than the test could hold
                conn.sendall(chunk)
                sent["bytes"] += len(chunk)
        except OSError:
            pass  # the worker closed the connection
        finally:
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    enqueue(store_engine)
    url = f"http://127.0.0.1:{server.getsockname()[1]}/hook"
    sender = worker(store_engine, config(url, secret_env=None), ManualClock(T0))
    started = time.monotonic()
    try:
        assert sender.deliver_due() == 1
    finally:
        sender.stop()
        server.close()
    thread.join(timeout=10)
    assert time.monotonic() - started < 10
    assert log(store_engine) == [(1, "delivered", 200)]
    assert sent["bytes"] < 1 << 30  # the connection was dropped long before
