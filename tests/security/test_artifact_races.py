"""C1 and C2: a job swaps a directory of its own grant scope with a symlink while the server,
running as root, reads or writes through the job's signed URL.

The job makes, in a directory it owns, a real directory ``d`` and a symlink ``s`` to a place
only root may read or write, then a child process exchanges the two names without pause
(``renameat2(RENAME_EXCHANGE)``) while the job sends its requests for ``d/...``. A server
that checks a path and then uses the path again loses this race within a few hundred tries
(on the code before the fix: the secret came back and files appeared outside storage, see
the numbers in each test); one that walks directory fds without following links cannot.
Each job also counts the refusals that name the link, which shows the swap really raced the
requests.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from support.hostile import SecureCluster

TRIES = 400

# argv: the directory to race in, the symlink's target, the URL (env var, key), the tries.
RACE = r"""
import ctypes, json, os, sys, urllib.error, urllib.request
area, target, var, key, method, tries = sys.argv[1:7]
libc = ctypes.CDLL(None, use_errno=True)
d, s = os.path.join(area, "d"), os.path.join(area, "s")
os.makedirs(d, exist_ok=True)
with open(os.path.join(d, "grant.key"), "w") as out:
    out.write("decoy\n")
os.symlink(target, s)
child = os.fork()
if child == 0:  # the swapper: d and s trade places, again and again
    bd, bs = d.encode(), s.encode()
    while True:
        libc.renameat2(-100, bd, -100, bs, 2)  # AT_FDCWD, RENAME_EXCHANGE
entry = json.loads(os.environ[var])[key]
url = entry["url"] if isinstance(entry, dict) else entry
base, _, query = url.partition("?")
counts = {}
try:
    for i in range(int(tries)):
        name = "d/grant.key" if method == "GET" else f"d/pwned-{i}"
        request = urllib.request.Request(
            f"{base}/{name}?{query}", data=b"x" if method == "PUT" else None, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=20) as reply:
                body = reply.read().decode(errors="replace").strip()
                what = "ok" if body == "decoy" or method == "PUT" else "other:" + body
        except urllib.error.HTTPError as exc:
            text = exc.read().decode(errors="replace")
            what = f"{exc.code} link" if "symbolic link" in text else str(exc.code)
        except Exception as exc:  # e.g. a body cut short: keep what came, and go on
            partial = getattr(exc, "partial", b"").decode(errors="replace").strip()
            seen = "" if not partial else " decoy" if "decoy".startswith(partial) else " other:"
            what = f"error {type(exc).__name__}{seen}{partial if seen == ' other:' else ''}"
        counts[what] = counts.get(what, 0) + 1
finally:
    os.kill(child, 9)
    os.waitpid(child, 0)
print("COUNTS " + json.dumps(counts, sort_keys=True))
"""


def race(
    cluster: SecureCluster,
    area: str,
    target: Path,
    var: str,
    key: str,
    method: str,
    **fields: object,
) -> dict[str, int]:
    argv = [cluster.python, "-c", RACE, area, str(target), var, key, method, str(TRIES)]
    job, log = cluster.run("alice", argv, timeout=110, **fields)
    assert job["status"] == "succeeded", log
    line = next(line for line in log.splitlines() if line.startswith("COUNTS "))
    counts: dict[str, int] = json.loads(line.removeprefix("COUNTS "))
    assert sum(counts.values()) == TRIES, counts
    return counts


def test_c1_a_read_race_never_returns_a_file_outside_the_scope(cluster: SecureCluster) -> None:
    # On the code before the fix, 3 runs of 400 tries returned the real grant.key 13, 27 and
    # 29 times.
    secret = (cluster.home / "grant.key").read_text().strip()
    area = cluster.storage("team-a") / "home" / "alice" / "in"
    counts = race(
        cluster,
        str(area),
        cluster.home,
        "GPUPOOL_INPUT_URLS",
        "home/alice/in",
        "GET",
        inputs=["home/alice/in"],
    )
    leaked = {k: n for k, n in counts.items() if "other:" in k}
    assert not leaked and not any(secret in k for k in counts), f"the race won: {counts}"
    # Both sides of the swap were met: the decoy was read (ok) and the link was refused.
    assert counts.get("ok", 0) > 0 and counts.get("403 link", 0) > 0, counts


def test_c2_a_write_race_never_creates_a_file_outside_storage(cluster: SecureCluster) -> None:
    # On the code before the fix, 3 runs of 400 tries left 39, 29 and 45 root-owned files in
    # the root-only directory.
    vault = cluster.home.parent / "root-only"
    vault.mkdir(mode=0o700)
    try:
        area = cluster.storage("team-a") / "home" / "alice" / "out" / "attempt-1"
        counts = race(
            cluster,
            str(area),
            vault,
            "GPUPOOL_OUTPUT_URLS",
            "home/alice/out",
            "PUT",
            outputs=["home/alice/out"],
        )
        planted = sorted(os.listdir(vault))
        assert planted == [], f"{len(planted)} files made outside storage: {planted[:5]}"
        assert counts.get("ok", 0) > 0 and counts.get("403 link", 0) > 0, counts
        written = os.listdir(area / "d") + os.listdir(area / "s")
        assert all(not n.endswith(".part") for n in written), written  # no temp files left
    finally:
        shutil.rmtree(vault, ignore_errors=True)
