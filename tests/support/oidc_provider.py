"""The local OpenID Connect provider of scripts/oidc/up.sh, with the device flow, for tests
that sign in as a user would: through the provider's own pages and endpoints."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
HOW = "run scripts/oidc/up.sh (needs node >= 20 and npm from the registry, or root to install)"


@dataclass(frozen=True)
class Provider:
    issuer: str
    users_file: Path
    clients_file: Path

    def set_users(
        self,
        *names: str,
        groups: list[str] | None = None,
        claims: dict[str, dict[str, object]] | None = None,
    ) -> None:
        """The provider's users (password ``pw-<name>``), each in ``groups``; ``claims``: per
        user, extra claims of their tokens."""
        users = {
            n: {"password": f"pw-{n}", "groups": groups or [], "claims": (claims or {}).get(n, {})}
            for n in names
        }
        self.users_file.write_text(json.dumps(users))

    def password_token(self, user: str, client_id: str = "gpupool-cli") -> str:
        """``user``'s access token through the password grant."""
        discovery = httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=10)
        reply = httpx.post(
            discovery.json()["token_endpoint"],
            data={
                "grant_type": "password",
                "username": user,
                "password": f"pw-{user}",
                "client_id": client_id,
            },
            timeout=10,
        )
        assert reply.status_code == 200, reply.text
        token: str = reply.json()["access_token"]
        return token

    def set_clients(self, clients: dict[str, dict[str, float]]) -> None:
        """Device-flow timings per client id: ``interval`` and ``expires_in`` seconds."""
        self.clients_file.write_text(json.dumps(clients))

    def answer(self, verification_uri_complete: str, user: str, action: str) -> httpx.Response:
        """What a user does in the browser: open the page the CLI showed, sign in, and
        approve or deny. The form is read from the page, so its fields are the provider's."""
        page = httpx.get(verification_uri_complete, timeout=10)
        assert page.status_code == 200, page.text
        form = dict(re.findall(r'<input name="(\w+)"(?: value="([^"]*)")?', page.text))
        action_path = re.search(r'<form method="post" action="([^"]+)"', page.text)
        assert action_path is not None and form.get("user_code"), page.text
        form.update(username=user, password=f"pw-{user}", action=action)
        return httpx.post(f"{self.issuer}{action_path.group(1)}", data=form, timeout=10)


def start_provider() -> Provider:
    """The running provider (started if needed); skips the test, saying how, when it cannot."""
    try:
        done = subprocess.run(
            [str(ROOT / "scripts" / "oidc" / "up.sh")], capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"no OIDC provider ({HOW}): {exc}")
    if done.returncode != 0:
        pytest.skip(f"no OIDC provider ({HOW}): {done.stderr.strip()[-400:]}")
    values = dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return Provider(values["issuer"], Path(values["users"]), Path(values["clients"]))
