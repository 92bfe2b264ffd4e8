"""H1: what a job's uid can read or write under ``$GPUPOOL_HOME``.

The attack: alice's job read ``gpupool.db`` (0644 in a 0755 home: every team's commands, bob's
job env with his ``WANDB_API_KEY``, token hashes, the audit log) and bob's ``handle.json``,
``job.json`` and ``runner.log``. Here, after a lifecycle on the real server as root (alice's
job with a secret in its env runs to its end, bob's job is cancelled while it runs), the test
walks ``$GPUPOOL_HOME`` as root and checks every path two ways:

* by its mode: nothing is readable or writable by "others", and the only directories others
  may traverse are listed in ``TRAVERSABLE``, each with the reason;
* for real: a job of alice and a job of bob try to read (open, list) and write (``access``)
  every path, and may succeed only where the storage layout and their own attempts allow:
  their team's storage (not another member's home), and the work/, inputs/ and outputs/ of
  their own attempts. The store, the grant key and the runner's files are never among them.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.hostile import PEOPLE, POOL, SecureCluster

pytestmark = pytest.mark.timeout(180)

SECRET = "wandb-secret-of-alice-0123456789"
ATTEMPT = re.compile(rf"runs/local/{re.escape(POOL)}/[^/]+")
# Directories that other uids may pass through (o+x, never o+r or o+w), and why.
TRAVERSABLE = {
    re.compile(r"\."): "GPUPOOL_HOME: jobs pass through it to storage/ and runs/",
    re.compile(r"storage"): "the team storage roots below it (data.storage)",
    re.compile(r"runs"): "the backends' state: jobs pass through to their attempt dirs",
    re.compile(r"runs/local"): "the local backend's pools",
    re.compile(rf"runs/local/{re.escape(POOL)}"): "the pool's attempts (not listable)",
    ATTEMPT: "one attempt: its job passes through to work/, inputs/, outputs/",
}
JOB_DIRS = ("work", "inputs", "outputs")

# Runs as the job's uid: for each path (relative to home), "r" if it could open (a file) or
# list (a directory) it, "w" if access() says it may write it.
PROBE = r"""
import json, os, sys
home, paths = sys.argv[1], json.loads(sys.argv[2])
seen = {}
for rel in paths:
    path = os.path.join(home, rel)
    got = ""
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK))
        got += "r"
    except OSError:
        pass
    if os.access(path, os.W_OK):
        got += "w"
    seen[rel] = got
print("PROBE", json.dumps(seen))
"""


@dataclass(frozen=True)
class Entry:
    rel: str
    mode: int
    uid: int
    is_dir: bool


@dataclass(frozen=True)
class Lifecycle:
    entries: list[Entry]
    seen: dict[str, dict[str, str]]  # user -> rel path -> "r" / "w" / "rw" / ""
    owners: dict[str, str]  # attempt dir (rel) -> the user whose job it is


def walk(home: Path) -> list[Entry]:
    entries = []
    for top, dirs, files in os.walk(home):
        for name in [".", *dirs, *files]:
            path = Path(top) / name if name != "." else Path(top)
            info = path.lstat()
            rel = os.path.relpath(path, home)
            entries.append(Entry(rel, stat.S_IMODE(info.st_mode), info.st_uid, path.is_dir()))
    return entries


def probe(cluster: SecureCluster, user: str, rels: list[str]) -> dict[str, str]:
    job, log = cluster.run(user, [cluster.python, "-c", PROBE, str(cluster.home), json.dumps(rels)])
    assert job["status"] == "succeeded", log
    line = next(line for line in log.splitlines() if line.startswith("PROBE "))
    seen: dict[str, str] = json.loads(line.removeprefix("PROBE "))
    return seen


@pytest.fixture(scope="module")
def lifecycle(cluster: SecureCluster) -> Iterator[Lifecycle]:
    done, log = cluster.run(
        "alice", [cluster.python, "-c", "print('trained')"], env={"WANDB_API_KEY": SECRET}
    )
    assert done["status"] == "succeeded", log
    held = cluster.submit("bob", [cluster.python, "-c", "import time; time.sleep(600)"])
    cluster.wait("bob", held["id"], until=frozenset({"running"}))
    assert cluster.client("bob").post(f"/v1/jobs/{held['id']}/cancel").status_code == 200
    assert cluster.wait("bob", held["id"])["status"] == "cancelled"

    entries = walk(cluster.home)
    uid_to_user = {cluster.uid(p): p for p in PEOPLE}
    owners = {}
    for entry in entries:
        if ATTEMPT.fullmatch(entry.rel):
            work = cluster.home / entry.rel / "work"
            owners[entry.rel] = uid_to_user.get(work.stat().st_uid, "?")
    rels = [e.rel for e in entries]
    seen = {user: probe(cluster, user, rels) for user in ("alice", "bob")}
    yield Lifecycle(entries, seen, owners)


def allowed(user: str, rel: str, owners: dict[str, str]) -> str:
    """What the storage layout and the user's own attempts let a job of ``user`` do."""
    team = PEOPLE[user]
    parts = rel.split("/")
    if parts[:2] == ["storage", team]:
        if len(parts) >= 4 and parts[2] == "home" and parts[3] != user:
            return ""  # another member's home
        writable = parts[2:3] == ["shared"] or parts[2:4] == ["home", user]
        return "rw" if writable else "r"
    attempt = "/".join(parts[:4])
    if owners.get(attempt) == user and len(parts) >= 5 and parts[4] in JOB_DIRS:
        return "rw"
    return ""


def test_the_lifecycle_left_the_files_that_matter(lifecycle: Lifecycle) -> None:
    """The checks below cover the store, the key and both attempts' runner files."""
    rels = {e.rel for e in lifecycle.entries}
    assert {"gpupool.db", "gpupool.db-wal", "gpupool.db-shm", "grant.key"} <= rels
    assert sorted(lifecycle.owners.values()) == ["alice", "bob"]
    for attempt in lifecycle.owners:
        for name in ("spec.json", "handle.json", "job.json", "exit.json", "output.log"):
            assert f"{attempt}/{name}" in rels


def test_nothing_is_open_to_other_users_beyond_traversal(lifecycle: Lifecycle) -> None:
    problems = []
    for e in lifecycle.entries:
        others = e.mode & 0o007
        if others & 0o006:
            problems.append(f"{e.rel} {oct(e.mode)}: others may read or write it")
        elif others & 0o001 and e.is_dir:
            if not any(pattern.fullmatch(e.rel) for pattern in TRAVERSABLE):
                problems.append(f"{e.rel} {oct(e.mode)}: others may traverse it")
        elif others and not e.is_dir:
            problems.append(f"{e.rel} {oct(e.mode)}: others may execute it")
    assert problems == []


def test_the_store_key_and_runner_files_are_roots_alone(lifecycle: Lifecycle) -> None:
    def private(e: Entry) -> bool:
        runner_file = not e.is_dir and ATTEMPT.fullmatch(os.path.dirname(e.rel)) is not None
        return runner_file or e.rel.startswith("gpupool.db") or e.rel == "grant.key"

    files = [e for e in lifecycle.entries if private(e)]
    assert len(files) >= 4 + 2 * 5
    assert [f"{e.rel} {oct(e.mode)} uid {e.uid}" for e in files if e.mode != 0o600 or e.uid] == []


@pytest.mark.parametrize("user", ["alice", "bob"])
def test_a_job_reaches_only_its_teams_storage_and_its_own_attempts(
    lifecycle: Lifecycle, user: str
) -> None:
    seen = lifecycle.seen[user]
    beyond = {
        rel: got
        for rel, got in seen.items()
        if set(got) - set(allowed(user, rel, lifecycle.owners))
    }
    assert beyond == {}
    assert seen["gpupool.db"] == "" and seen["grant.key"] == ""
    # The probe does see what it may (it is not blind): its own work dir, its team's share.
    own = next(a for a, owner in lifecycle.owners.items() if owner == user)
    assert seen[f"{own}/work"] == "rw"
    assert seen[f"storage/{PEOPLE[user]}/shared"] == "rw"
