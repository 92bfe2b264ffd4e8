"""H2 and M5: what a signed URL reaches on disk is what the job's user may reach, and what it
writes belongs to that user.

H2: alice's job plants symlinks in its own grant scopes that point into carol's home, and
asks, through its own URLs, for carol's private file and to write into carol's home; it also
asks for a file of carol's in ``shared/`` that only carol may read. On the code before the fix
the server, as root, served carol's file (200) and wrote through the links (201).

M5: what alice's job writes through its URLs is owned by alice, with the team's group in
``shared/``, and the modes of the storage layout; alice's next job reads and deletes it, and
carol's job reads the one in ``shared/``. On the code before the fix the files were
``root:root 0600`` and no job could read them.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from support.hostile import SecureCluster

SECRET = "carol's private notes"

# argv: JSON list of [method, env var, key, suffix] requests; prints one JSON line of results.
ASK = r"""
import json, os, sys, urllib.error, urllib.request
for link, target in json.loads(sys.argv[2]):
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(target, link)
results = []
for method, var, key, suffix in json.loads(sys.argv[1]):
    entry = json.loads(os.environ[var])[key]
    url = entry["url"] if isinstance(entry, dict) else entry
    base, _, query = url.partition("?")
    data = b"written by alice" if method == "PUT" else None
    request = urllib.request.Request(f"{base}/{suffix}?{query}", data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=20) as reply:
            results.append([suffix, reply.status, reply.read().decode(errors="replace")])
    except urllib.error.HTTPError as exc:
        results.append([suffix, exc.code, exc.read().decode(errors="replace")])
print("RESULTS " + json.dumps(results))
"""


def ask(
    cluster: SecureCluster,
    user: str,
    requests: list[list[str]],
    links: Sequence[tuple[Path, str]] = (),
    **fields: object,
) -> list[tuple[str, int, str]]:
    argv = [
        cluster.python,
        "-c",
        ASK,
        json.dumps(requests),
        json.dumps([[str(link), target] for link, target in links]),
    ]
    job, log = cluster.run(user, argv, **fields)
    assert job["status"] == "succeeded", log
    line = next(line for line in log.splitlines() if line.startswith("RESULTS "))
    return [tuple(r) for r in json.loads(line.removeprefix("RESULTS "))]  # type: ignore[misc]


def put_file(path: Path, text: str, uid: int, gid: int, mode: int) -> None:
    path.write_text(text)
    os.chown(path, uid, gid)
    path.chmod(mode)


def test_h2_links_and_modes_in_alices_scopes_never_reach_carols_files(
    cluster: SecureCluster,
) -> None:
    root = cluster.storage("team-a")
    carol, team_gid = cluster.uid("carol"), cluster.team_gid("team-a")
    private = root / "home" / "carol" / "private.txt"
    put_file(private, SECRET, carol, cluster.gid("carol"), 0o600)
    notes = root / "shared" / "carols" / "notes.txt"
    notes.parent.mkdir()
    os.chown(notes.parent, carol, team_gid)
    notes.parent.chmod(0o2770)
    put_file(notes, SECRET, carol, team_gid, 0o600)  # in shared/, but carol's alone

    home = root / "home" / "alice"
    scope_in, scope_out = home / "h2in", home / "h2out" / "attempt-1"
    links = [
        (scope_in / "tofile", "../../carol/private.txt"),
        (scope_in / "todir", "../../carol"),
        (scope_out / "tofile", "../../../carol/private.txt"),
        (scope_out / "todir", "../../../carol"),
    ]
    inputs, outputs = "GPUPOOL_INPUT_URLS", "GPUPOOL_OUTPUT_URLS"
    results = ask(
        cluster,
        "alice",
        [
            ["GET", inputs, "home/alice/h2in", "tofile"],
            ["GET", inputs, "home/alice/h2in", "todir/private.txt"],
            ["GET", inputs, "shared/carols", "notes.txt"],
            ["PUT", outputs, "home/alice/h2out", "tofile"],
            ["PUT", outputs, "home/alice/h2out", "todir/planted.txt"],
        ],
        links,
        inputs=["home/alice/h2in", "shared/carols"],
        outputs=["home/alice/h2out"],
    )
    for suffix, status, body in results:
        assert status == 403, f"{suffix}: {status} {body}"
        assert SECRET not in body
    reasons = [json.loads(body)["error"]["message"] for _, _, body in results]
    assert "h2in/tofile is a symbolic link" in reasons[0]
    assert "h2in/todir is a symbolic link" in reasons[1]
    assert "may not read shared/carols/notes.txt" in reasons[2]
    assert "attempt-1/tofile is a symbolic link" in reasons[3]
    assert "attempt-1/todir is a symbolic link" in reasons[4]
    assert private.read_text() == SECRET and os.listdir(private.parent) == ["private.txt"]
    assert notes.read_text() == SECRET


def owner(path: Path) -> tuple[int, int, str]:
    info = path.stat()
    return info.st_uid, info.st_gid, oct(stat.S_IMODE(info.st_mode))


def test_m5_outputs_belong_to_the_user_with_the_layout_modes(cluster: SecureCluster) -> None:
    alice, alice_gid, team_gid = (
        cluster.uid("alice"),
        cluster.gid("alice"),
        cluster.team_gid("team-a"),
    )
    outputs = "GPUPOOL_OUTPUT_URLS"
    results = ask(
        cluster,
        "alice",
        [
            ["PUT", outputs, "home/alice/m5", "sub/f.txt"],
            ["PUT", outputs, "shared/m5", "sub/f.txt"],
        ],
        outputs=["home/alice/m5", "shared/m5"],
    )
    assert [status for _, status, _ in results] == [201, 201], results

    root = cluster.storage("team-a")
    mine = root / "home" / "alice" / "m5"
    for made in (mine, mine / "attempt-1", mine / "attempt-1" / "sub"):
        assert owner(made) == (alice, alice_gid, "0o700"), made
    assert owner(mine / "attempt-1" / "sub" / "f.txt") == (alice, alice_gid, "0o600")
    ours = root / "shared" / "m5"
    for made in (ours, ours / "attempt-1", ours / "attempt-1" / "sub"):
        assert owner(made) == (alice, team_gid, "0o2770"), made
    assert owner(ours / "attempt-1" / "sub" / "f.txt") == (alice, team_gid, "0o660")

    home_file = mine / "attempt-1" / "sub" / "f.txt"
    shared_file = ours / "attempt-1" / "sub" / "f.txt"
    read = f"print(open({str(shared_file)!r}).read())"
    job, log = cluster.run("carol", [cluster.python, "-c", read])
    assert job["status"] == "succeeded" and "written by alice" in log, log

    clean = (
        "import shutil\n"
        f"for f in ({str(home_file)!r}, {str(shared_file)!r}):\n"
        "    print(open(f).read())\n"
        f"shutil.rmtree({str(mine)!r})\n"
        f"shutil.rmtree({str(ours)!r})\n"
    )
    job, log = cluster.run("alice", [cluster.python, "-c", clean])
    assert job["status"] == "succeeded" and log.count("written by alice") == 2, log
    assert not mine.exists() and not ours.exists()
