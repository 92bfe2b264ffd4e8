"""A real HTTP receiver of webhooks, for tests: it checks each POST's signature."""

from __future__ import annotations

import hashlib
import hmac
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = "s3cret-for-tests"


class Receiver:
    """A local HTTP server that checks each POST's signature (204 if it matches, 401 if not),
    or answers ``status``; ``hang`` makes it wait before answering."""

    def __init__(self, status: int | None = None) -> None:
        self.status = status
        self.got: list[tuple[dict[str, str], bytes, bool]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.hang = False
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                valid = hmac.compare_digest(self.headers.get("X-Gpupool-Signature", ""), expected)
                receiver.got.append((dict(self.headers), body, valid))
                receiver.entered.set()
                if receiver.hang:
                    receiver.release.wait(10)
                self.send_response(receiver.status or (204 if valid else 401))
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
