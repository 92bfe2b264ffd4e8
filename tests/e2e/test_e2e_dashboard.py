"""The dashboard in a real browser (headless Chromium through Selenium) against a real
``gpupool server`` on the demo configuration, signed in as the people who use it:

* alice (member of team-a) sees team-a's jobs and not team-b's, follows a running job's log
  as it grows, and cancels the job;
* vera (viewer of team-a) gets no cancel button, and a cancel forced past the page gets 403;
* dave signs in through the identity provider (authorization code with PKCE);
* admin sees every team and the audit log.

Every page is screenshot at 1280x800 into the test's output directory (``GPUPOOL_TEST_OUTPUT``,
else pytest's tmp_path); any console error or failed request fails the test.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support.browser import Browser, chromium_paths, start_browser
from support.oidc_provider import Provider, start_provider
from support.server import ServerProcess, wait_for

# The first test may install Chromium (apt) and the OIDC provider (npm) in its fixtures.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"
WEB_CLIENT = "gpupool-web"
# Prints a numbered line twice a second for a minute: long enough to watch, short to cancel.
TALKER = ["sh", "-c", "for i in $(seq 1 120); do echo step-$i; sleep 0.5; done"]


def start_server(env: dict[str, str] | None = None) -> tuple[ServerProcess, Path]:
    base = Path(tempfile.mkdtemp(prefix="gpupool-ui-"))
    base.chmod(0o755)  # jobs run as the demo's uids when the tests run as root
    server = ServerProcess(base / "home", DEMO, env=env)
    server.start(timeout=60)
    return server, base


@pytest.fixture(scope="module")
def paths() -> dict[str, str]:
    return chromium_paths()


@pytest.fixture(scope="module")
def server(paths: dict[str, str]) -> Iterator[ServerProcess]:
    del paths  # no server is started when no browser can drive it
    process, base = start_server()
    try:
        yield process
    finally:
        process.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def shots(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    root = os.environ.get("GPUPOOL_TEST_OUTPUT")
    return (Path(root) / "dashboard" if root else tmp_path / "screenshots") / request.node.name


@pytest.fixture
def browser(paths: dict[str, str], shots: Path) -> Iterator[Browser]:
    found = start_browser(paths, shots)
    try:
        yield found
        found.check()
        assert found.problems == [], "\n".join(found.problems)
    finally:
        found.quit()


def sign_in(browser: Browser, server: ServerProcess, user: str) -> None:
    from selenium.webdriver.common.by import By

    browser.open(f"{server.url}/ui/")  # sent on to the sign-in page
    assert "/ui/login" in browser.driver.current_url
    browser.driver.find_element(By.ID, "token").send_keys(server.tokens[user])
    browser.driver.find_element(By.ID, "sign-in").click()
    browser.wait(lambda: browser.exists("#whoami"), what="the signed-in overview")
    assert browser.text("#whoami").startswith(user)
    browser.check()


def submit(server: ServerProcess, user: str, **body: object) -> str:
    body.setdefault("command", ["true"])
    with server.client(user) as client:
        answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def status(server: ServerProcess, job_id: str) -> str:
    with server.client("admin") as client:
        return str(client.get(f"/v1/jobs/{job_id}").json()["status"])


def test_alice_sees_her_team_follows_a_log_and_cancels(
    server: ServerProcess, browser: Browser
) -> None:
    from selenium.webdriver.common.by import By

    theirs = submit(server, "bob", name="team-b-secret-job")
    job = submit(server, "alice", name="talker", command=TALKER, resources={"gpu_types": ["t4"]})
    wait_for(lambda: status(server, job) == "running", 60, "alice's job to run")
    sign_in(browser, server, "alice")
    browser.shot("overview")

    browser.open(f"{server.url}/ui/jobs")
    rows = browser.driver.find_elements(By.CSS_SELECTOR, "tr.job")
    teams = {row.get_attribute("data-team") for row in rows}
    assert teams == {"team-a"}, teams
    assert job in browser.driver.page_source and theirs not in browser.driver.page_source
    browser.shot("jobs")

    browser.open(f"{server.url}/ui/jobs/{job}")
    browser.wait(lambda: "step-2" in browser.text("#log"), what="the first log lines")
    seen = len(browser.text("#log").splitlines())
    browser.wait(  # the page is not reloaded: the lines arrive over the open stream
        lambda: len(browser.text("#log").splitlines()) >= seen + 3, what="more log lines"
    )
    lines = browser.text("#log").splitlines()
    assert lines[:3] == ["step-1", "step-2", "step-3"]
    browser.shot("job")
    browser.driver.find_element(By.ID, "cancel").click()
    browser.wait(
        lambda: browser.text("#job-status") in ("cancelling", "cancelled"), what="the cancel"
    )
    wait_for(lambda: status(server, job) == "cancelled", 30, "the job to be cancelled")
    browser.wait(lambda: browser.text("#job-status") == "cancelled", what="the live status")
    browser.wait(lambda: not browser.exists("#cancel"), what="the cancel button to go")
    browser.wait(lambda: browser.text("#log-state") == "(complete)", what="the log to end")

    for page in ("teams", "pools", "usage"):
        browser.open(f"{server.url}/ui/{page}")
        assert browser.exists("main h1")
        browser.shot(page)
    assert "team-b" not in browser.text("main")


def test_vera_a_viewer_gets_no_cancel_button_and_a_forced_cancel_is_refused(
    server: ServerProcess, browser: Browser
) -> None:
    from selenium.webdriver.common.by import By

    job = submit(server, "alice", name="waits", resources={"gpus": 4, "gpu_types": ["h100"]})
    sign_in(browser, server, "vera")
    browser.open(f"{server.url}/ui/jobs/{job}")
    assert browser.text("#job-status") in ("queued", "admitted", "running")
    assert not browser.exists("#cancel")
    browser.shot("job-as-viewer")
    # The cancel form is not there; a viewer who posts it anyway, with the session's own
    # CSRF token, is refused by the service.
    csrf = re.search(r'name="csrf" value="([^"]+)"', browser.driver.page_source)
    assert csrf is not None
    cookies = {c["name"]: c["value"] for c in browser.driver.get_cookies()}
    forced = httpx.post(
        f"{server.url}/ui/jobs/{job}/cancel",
        data={"csrf": csrf.group(1)},
        cookies=cookies,
        follow_redirects=False,
    )
    assert forced.status_code == 403, forced.text
    assert status(server, job) != "cancelled"
    browser.driver.find_element(By.ID, "logout").click()
    browser.wait(lambda: "/ui/login" in browser.driver.current_url, what="the sign-in page")
    browser.open(f"{server.url}/ui/jobs/{job}")
    assert "/ui/login" in browser.driver.current_url  # signed out: the session is gone
    with server.client("admin") as client:  # leave the demo's h100 quota free for the others
        client.post(f"/v1/jobs/{job}/cancel")


def test_admin_sees_every_team_and_the_audit_log(server: ServerProcess, browser: Browser) -> None:
    # A cluster with some life in it, for the screenshots (the README shows two of them).
    sleeper = ["sleep", "20"]
    running = [
        submit(server, "bob", name="bert-finetune", command=sleeper, resources={"gpus": 2}),
        submit(server, "alice", name="llm-eval", command=sleeper, resources={"gpu_types": ["t4"]}),
        submit(server, "carol", name="vision-sweep", command=sleeper, resources={"gpus": 2}),
    ]
    submit(server, "alice", name="waits-for-h100", resources={"gpus": 2, "gpu_types": ["h100"]})
    submit(server, "bob", name="bobs-job")
    for job in running:
        wait_for(lambda job=job: status(server, job) == "running", 60, f"{job} to run")
    sign_in(browser, server, "admin")
    browser.shot("overview-as-admin")
    # The overview's counts follow the queue without a reload.
    queued = browser.text('[data-key="queued-team-c"]')
    submit(
        server, "admin", team="team-c", name="waits-too", resources={"gpus": 4, "gpu_types": ["t4"]}
    )
    browser.wait(
        lambda: browser.text('[data-key="queued-team-c"]') == str(int(queued) + 1),
        what="the live pending count",
    )
    browser.open(f"{server.url}/ui/teams")
    for team in ("team-a", "team-b", "team-c"):
        assert browser.exists(f"#team-{team}"), team
    browser.shot("teams-as-admin")
    browser.open(f"{server.url}/ui/jobs")
    browser.shot("jobs-as-admin")
    browser.open(f"{server.url}/ui/audit?actor=bob")
    assert "job.submit" in browser.text("#audit")
    browser.shot("audit")


@pytest.fixture(scope="module")
def oidc_server(paths: dict[str, str]) -> Iterator[tuple[ServerProcess, Provider]]:
    del paths
    provider = start_provider()
    env = {
        "GPUPOOL_OIDC_ISSUER": provider.issuer,
        "GPUPOOL_OIDC_AUDIENCE": "gpupool",
        "GPUPOOL_OIDC_CLIENT_ID": WEB_CLIENT,
    }
    process, base = start_server(env)
    try:
        yield process, provider
    finally:
        process.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_sign_in_through_the_identity_provider(
    oidc_server: tuple[ServerProcess, Provider], browser: Browser
) -> None:
    from selenium.webdriver.common.by import By

    server, provider = oidc_server
    provider.set_users("dave", groups=["TeamA"])
    browser.open(f"{server.url}/ui/teams")
    browser.shot("sign-in")
    browser.driver.find_element(By.ID, "oidc-sign-in").click()
    browser.wait(lambda: browser.exists("#username"), what="the provider's sign-in page")
    assert browser.driver.current_url.startswith(provider.issuer)
    browser.driver.find_element(By.ID, "username").send_keys("dave")
    browser.driver.find_element(By.ID, "password").send_keys("pw-dave")
    browser.driver.find_element(By.ID, "approve").click()
    browser.wait(lambda: browser.exists("#whoami"), what="the dashboard, signed in")
    assert browser.driver.current_url == f"{server.url}/ui/teams"
    assert browser.text("#whoami") == "dave"
    assert browser.exists("#team-team-a") and not browser.exists("#team-team-b")
    assert "code=" not in browser.driver.current_url
    browser.shot("teams-after-oidc")
