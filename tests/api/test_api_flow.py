"""Jobs through the controller onto the local backend: quota, spill-over, logs, cancel."""

from __future__ import annotations

from pathlib import Path

from support.apikit import Api

WAIT_FOR_RELEASE = ["sh", "-c", 'while [ ! -f "$RELEASE" ]; do sleep 0.05; done; echo released']


def blocking(api: Api, user: str, release: Path, **body: object) -> str:
    body.setdefault("resources", {"gpus": 1, "gpu_types": ["h100"]})
    job = api.submit(user, command=WAIT_FOR_RELEASE, env={"RELEASE": str(release)}, **body)
    return str(job["id"])


def test_third_job_waits_for_team_quota_then_starts(api: Api, open_dir: Path) -> None:
    releases = [open_dir / f"release-{i}" for i in range(3)]
    jobs = [blocking(api, "alice", r) for r in releases]
    bob = blocking(api, "bob", open_dir / "release-bob")
    api.tick_until(
        lambda: [api.status(j) for j in (*jobs[:2], bob)] == ["running"] * 3, what="3 running"
    )
    assert api.status(jobs[2]) == "queued"
    why = api.client.get(f"/v1/jobs/{jobs[2]}/why", headers=api.as_("alice")).json()
    assert why["reasons"][0]["gpu_type"] == "h100"
    assert why["reasons"][0]["code"] == "quota"
    assert "team-a" in why["summary"] and why["last_considered_at"] is not None

    releases[0].touch()
    api.tick_until(lambda: api.status(jobs[0]) == "succeeded", what="first job done")
    api.tick_until(lambda: api.status(jobs[2]) == "running", what="third job starts")
    assert api.status(bob) == "running"  # bob's job was never affected
    for r in (*releases, open_dir / "release-bob"):
        r.touch()
    api.tick_until(lambda: all(api.status(j) == "succeeded" for j in (*jobs, bob)), what="all done")


def test_job_spills_over_to_its_second_gpu_type(api: Api, open_dir: Path) -> None:
    release = open_dir / "release"
    held = [blocking(api, u, release) for u in ("alice", "alice", "bob", "bob")]  # h100 full
    api.tick_until(lambda: all(api.status(j) == "running" for j in held), what="h100 full")
    either = blocking(api, "alice", release, resources={"gpus": 1, "gpu_types": ["h100", "t4"]})
    only_h100 = blocking(api, "alice", release)
    api.tick_until(lambda: api.status(either) == "running", what="spill-over to t4")
    assert api.job("alice", either)["gpu_type"] == "t4"
    assert api.status(only_h100) == "queued"
    release.touch()
    api.tick_until(
        lambda: api.status(only_h100) == "running" or api.status(only_h100) == "succeeded",
        what="h100-only job starts once h100 frees up",
    )


def test_logs_and_exit_codes(api: Api) -> None:
    ok = api.submit("alice", command=["sh", "-c", "echo hello; echo oops >&2"])["id"]
    bad = api.submit("alice", command=["sh", "-c", "exit 3"])["id"]
    api.tick_until(
        lambda: api.status(ok) == "succeeded" and api.status(bad) == "failed", what="both finished"
    )
    logs = api.client.get(f"/v1/jobs/{ok}/logs", headers=api.as_("alice"))
    assert logs.status_code == 200
    assert "hello" in logs.text and "oops" in logs.text
    assert logs.headers["X-Log-Complete"] == "true"
    rest = api.client.get(
        f"/v1/jobs/{ok}/logs",
        params={"offset": logs.headers["X-Next-Offset"]},
        headers=api.as_("alice"),
    )
    assert rest.content == b""
    assert api.job("alice", bad)["exit_code"] == 3
    followed = api.client.get(
        f"/v1/jobs/{ok}/logs", params={"follow": "true"}, headers=api.as_("vera")
    )
    assert "hello" in followed.text


def test_cancel_running_job_signals_it(api: Api, open_dir: Path) -> None:
    marker = open_dir / "got-term"
    trap = f"trap 'touch {marker}; exit 143' TERM; while true; do sleep 0.05; done"
    job = api.submit("alice", command=["sh", "-c", trap])["id"]
    api.tick_until(lambda: api.status(job) == "running", what="running")
    response = api.client.post(f"/v1/jobs/{job}/cancel", headers=api.as_("alice"))
    assert response.status_code == 200
    # Until its attempt ends (it has its grace period), the job shows as cancelling.
    assert response.json()["status"] == api.status(job) == "cancelling"
    listed = api.client.get("/v1/jobs", params={"status": "cancelling"}, headers=api.as_("alice"))
    assert [j["id"] for j in listed.json()["items"]] == [job]
    running = api.client.get("/v1/jobs", params={"status": "running"}, headers=api.as_("alice"))
    assert job not in [j["id"] for j in running.json()["items"]]
    api.tick_until(lambda: api.status(job) == "cancelled", what="cancelled")
    assert marker.exists()
    again = api.client.post(f"/v1/jobs/{job}/cancel", headers=api.as_("alice"))
    assert again.status_code == 200 and again.json()["status"] == "cancelled"


def test_cancel_queued_job_is_immediate(api: Api) -> None:
    job = api.submit("alice", resources={"gpus": 1, "gpu_types": ["h100"]})["id"]
    response = api.client.post(f"/v1/jobs/{job}/cancel", headers=api.as_("alice"))
    assert response.json()["status"] == "cancelled"
    api.runtime.controller.tick()
    assert api.status(job) == "cancelled"
    assert api.job("alice", job)["attempts"] == []


def test_team_and_pool_usage(api: Api, open_dir: Path) -> None:
    release = open_dir / "release"
    job = blocking(api, "alice", release)
    api.tick_until(lambda: api.status(job) == "running", what="running")
    team = api.client.get("/v1/teams/team-a", headers=api.as_("alice")).json()
    assert team["quota"]["h100"]["used"] == 1 and team["running"] == 1
    assert team["members"]["alice"] == "member"
    pools = api.client.get("/v1/pools", headers=api.as_("bob")).json()["items"]
    h100 = next(p for p in pools if p["gpu_type"] == "h100")
    assert (h100["gpus_total"], h100["gpus_allocated"]) == (4, 1)
    release.touch()
    api.tick_until(lambda: api.status(job) == "succeeded", what="done")


def test_lost_attempt_is_reaped_and_requeued(api: Api, open_dir: Path) -> None:
    import json
    import os
    import signal

    import psutil
    from sqlalchemy import select

    from gpupool.state.models import AttemptRow

    job = blocking(api, "alice", open_dir / "release")
    api.tick_until(lambda: api.status(job) == "running", what="running")
    with api.runtime.sessions() as session:
        handle = session.scalars(select(AttemptRow.handle).where(AttemptRow.job_id == job)).one()
    attempt_dir = Path(handle["data"]["dir"])
    orphan = json.loads((attempt_dir / "job.json").read_text())["pid"]
    os.kill(int(handle["data"]["pid"]), signal.SIGKILL)  # the supervisor dies, the job lives on

    api.tick_until(lambda: api.job("alice", job)["attempt"] == 2, what="second attempt")
    first = api.job("alice", job)["attempts"][0]
    assert first["status"] == "lost"
    assert not psutil.pid_exists(orphan) or psutil.Process(orphan).status() == "zombie"
    (open_dir / "release").touch()
    api.tick_until(lambda: api.status(job) == "succeeded", what="second attempt succeeds")
