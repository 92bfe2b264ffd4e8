"""Q3 end to end on the local backend: a team reclaims its lent quota by preemption."""

from __future__ import annotations

from pathlib import Path

from support.apikit import Api

TRAPPED = (
    "trap 'touch \"$MARKS/term-$GPUPOOL_JOB_ID-$GPUPOOL_ATTEMPT\"; exit 143' TERM; "
    'while [ ! -f "$MARKS/release" ]; do sleep 0.05; done'
)


def test_owner_reclaims_borrowed_gpus_and_the_victim_is_requeued(api: Api, open_dir: Path) -> None:
    env = {"MARKS": str(open_dir)}
    h100 = {"gpus": 1, "gpu_types": ["h100"]}
    bobs = [
        api.submit("bob", command=["sh", "-c", TRAPPED], env=env, resources=h100)["id"]
        for _ in range(4)
    ]  # team-b's nominal is 2: two of these borrow team-a's idle h100s
    api.tick_until(lambda: all(api.status(j) == "running" for j in bobs), what="bob fills h100")
    team_b = api.client.get("/v1/teams/team-b", headers=api.as_("bob")).json()
    assert team_b["quota"]["h100"]["borrowed"] == 2

    alice = api.submit("alice", command=["sh", "-c", TRAPPED], env=env, resources=h100)["id"]
    api.tick_until(lambda: api.status(alice) == "running", what="alice's job starts")

    preempted = [j for j in bobs if api.job("bob", j)["attempts"][0]["status"] == "preempted"]
    assert len(preempted) == 1  # the smallest set that makes alice fit
    victim = preempted[0]
    assert (open_dir / f"term-{victim}-1").exists()  # it got SIGTERM, then its grace period
    assert api.job("bob", victim)["attempts"][0]["message"] == f"preempted for {alice}"
    assert api.status(victim) == "queued"  # requeued as a new attempt, keeping its place
    why = api.client.get(f"/v1/jobs/{victim}/why", headers=api.as_("bob")).json()
    assert why["reasons"]

    (open_dir / "release").touch()
    api.tick_until(
        lambda: all(api.status(j) == "succeeded" for j in [*bobs, alice]), what="all finish"
    )
    assert api.job("bob", victim)["attempt"] == 2
