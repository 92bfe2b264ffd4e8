"""The ground the attack tests stand on: a job of the secure cluster runs as its user."""

from __future__ import annotations

from support.hostile import SecureCluster


def test_a_job_runs_under_its_users_uid_and_team_group(cluster: SecureCluster) -> None:
    script = "import os; print(os.getuid(), os.getgid(), sorted(os.getgroups()))"
    job, log = cluster.run("alice", [cluster.python, "-c", script])
    assert job["status"] == "succeeded", log
    uid, gid, groups = log.split(maxsplit=2)
    assert (int(uid), int(gid)) == (cluster.uid("alice"), cluster.gid("alice"))
    assert str(cluster.team_gid("team-a")) in groups
    assert str(cluster.team_gid("team-b")) not in groups
