"""safe_fs: artifact I/O below a root through directory fds, never following a link, with the
job user's permissions checked on what was opened, and outputs given their owner."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpupool.data import safe_fs
from gpupool.data.safe_fs import EXEC, READ, WRITE, Identity, NewOwner

PLAIN = NewOwner(None, None, 0o700, 0o600)
ALICE = Identity(5001, 6001, frozenset({7001}))


def tree(root: Path) -> Path:
    """root/a/b/f.txt, and a directory outside the root that links point to."""
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f.txt").write_text("inside")
    outside = root.parent / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("outside")
    return outside


def read(root: Path, path: str, who: Identity | None = None) -> bytes:
    opened = safe_fs.open_read(root, path.split("/"), who)
    try:
        return os.pread(opened.fd, opened.size + 1, 0)
    finally:
        opened.close()


def write(root: Path, path: str, data: bytes, who: Identity | None = None) -> None:
    pending = safe_fs.begin_write(root, path.split("/"), who, PLAIN)
    pending.write(data)
    pending.commit()


@dataclass(frozen=True)
class Refusal:
    plant: str  # what to make under root before the request
    path: str
    error: type[safe_fs.Refused]
    message: str


REFUSALS = [
    pytest.param(
        Refusal("dirlink", "a/l/f.txt", safe_fs.Symlink, "a/l is a symbolic link"),
        id="a link to a directory outside, on the way",
    ),
    pytest.param(
        Refusal("filelink", "a/l", safe_fs.Symlink, "a/l is a symbolic link"),
        id="a link as the last component",
    ),
    pytest.param(
        Refusal("innerlink", "a/l", safe_fs.Symlink, "a/l is a symbolic link"),
        id="even a link that stays inside",
    ),
    pytest.param(Refusal("", "a/nope/f.txt", safe_fs.Missing, "a/nope does not exist"), id="gap"),
    pytest.param(
        Refusal("", "a/b/f.txt/x", safe_fs.Missing, "a/b/f.txt is not a directory"),
        id="a file on the way",
    ),
]


def plant(root: Path, outside: Path, what: str) -> None:
    if what == "dirlink":
        (root / "a" / "l").symlink_to(outside)
    elif what == "filelink":
        (root / "a" / "l").symlink_to(outside / "f.txt")
    elif what == "innerlink":
        (root / "a" / "l").symlink_to("b/f.txt")


@pytest.mark.parametrize("case", REFUSALS)
def test_reads_and_writes_refuse_links_and_gaps(tmp_path: Path, case: Refusal) -> None:
    root = tmp_path / "root"
    outside = tree(root)
    plant(root, outside, case.plant)
    with pytest.raises(case.error, match=case.message):
        read(root, case.path)
    if case.error is safe_fs.Missing:
        return  # a write makes missing directories (tested below)
    with pytest.raises(case.error, match=case.message):
        write(root, case.path, b"x")
    assert (outside / "f.txt").read_text() == "outside"
    assert sorted(os.listdir(outside)) == ["f.txt"]


def test_a_read_serves_only_regular_files(tmp_path: Path) -> None:
    root = tmp_path / "root"
    tree(root)
    assert read(root, "a/b/f.txt") == b"inside"
    with pytest.raises(safe_fs.NotAFile) as info:
        read(root, "a/b")
    assert info.value.directory
    os.mkfifo(root / "a" / "fifo")  # opening it for reading would block a server thread
    with pytest.raises(safe_fs.NotAFile, match="not a regular file"):
        read(root, "a/fifo")


def test_a_write_makes_directories_and_lands_whole(tmp_path: Path) -> None:
    root = tmp_path / "root"
    tree(root)
    write(root, "a/new/deeper/out.bin", b"data")
    assert (root / "a" / "new" / "deeper" / "out.bin").read_bytes() == b"data"
    write(root, "a/new/deeper/out.bin", b"replaced")
    assert (root / "a" / "new" / "deeper" / "out.bin").read_bytes() == b"replaced"
    pending = safe_fs.begin_write(root, ["a", "b", "f.txt"], None, PLAIN)
    pending.write(b"half")
    pending.abort()
    assert (root / "a" / "b" / "f.txt").read_text() == "inside"
    assert sorted(os.listdir(root / "a" / "b")) == ["f.txt"]  # no temporary file left
    with pytest.raises(safe_fs.NotAFile):
        write(root, "a/b", b"x")


def info(uid: int, gid: int, mode: int) -> os.stat_result:
    return os.stat_result((stat.S_IFREG | mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))


@dataclass(frozen=True)
class Bits:
    uid: int
    gid: int
    mode: int
    want: int
    allowed: bool


BITS = [
    pytest.param(Bits(5001, 1, 0o600, READ | WRITE, True), id="owner bits for the owner"),
    pytest.param(Bits(5001, 7001, 0o070, READ, False), id="the owner gets owner bits only"),
    pytest.param(Bits(1, 6001, 0o640, READ, True), id="group bits for the primary group"),
    pytest.param(Bits(1, 7001, 0o750, EXEC, True), id="group bits for an extra group"),
    pytest.param(Bits(1, 7001, 0o740, WRITE, False), id="group without w"),
    pytest.param(Bits(1, 2, 0o604, READ, True), id="other bits for everyone else"),
    pytest.param(Bits(1, 2, 0o770, EXEC, False), id="other without x"),
]


@pytest.mark.parametrize("case", BITS)
def test_permission_bits_follow_posix(case: Bits) -> None:
    assert ALICE.allows(info(case.uid, case.gid, case.mode), case.want) is case.allowed
    assert Identity(0, 0, frozenset()).allows(info(1, 1, 0), READ)  # root overrides


def test_the_users_permissions_are_checked_on_what_was_opened(tmp_path: Path) -> None:
    root = tmp_path / "root"
    tree(root)
    who = Identity(os.getuid() + 1, os.getgid() + 1, frozenset())  # "other" everywhere
    for d in (root, root / "a", root / "a" / "b"):
        d.chmod(0o755)
    (root / "a" / "b" / "f.txt").chmod(0o600)
    with pytest.raises(safe_fs.Denied, match=r"may not read a/b/f\.txt"):
        read(root, "a/b/f.txt", who)
    with pytest.raises(safe_fs.Denied, match="may not write in a/b"):
        write(root, "a/b/g.txt", b"x", who)
    with pytest.raises(safe_fs.Denied, match="may not create a/c"):
        write(root, "a/c/g.txt", b"x", who)
    (root / "a").chmod(0o750)
    with pytest.raises(safe_fs.Denied, match="may not enter a"):
        read(root, "a/b/f.txt", who)
    assert sorted(os.listdir(root / "a")) == ["b"] and sorted(os.listdir(root / "a" / "b")) == [
        "f.txt"
    ]


def test_a_sticky_directory_keeps_others_files(tmp_path: Path) -> None:
    root = tmp_path / "root"
    tree(root)
    (root / "a" / "b").chmod(0o1777)
    who = Identity(os.getuid() + 1, os.getgid() + 1, frozenset())
    with pytest.raises(safe_fs.Denied, match="sticky"):
        write(root, "a/b/f.txt", b"x", who)
    write(root, "a/b/mine.txt", b"x", who)


@pytest.mark.skipif(os.geteuid() != 0, reason="owners can be given only as root: run as root")
def test_what_a_write_creates_gets_the_owner_and_modes(tmp_path: Path) -> None:
    root = tmp_path / "root"
    tree(root)
    (root / "a" / "kept").mkdir(mode=0o755)
    new = NewOwner(5001, 7001, 0o2770, 0o660)
    pending = safe_fs.begin_write(root, ["a", "kept", "made", "f.bin"], None, new)
    pending.write(b"x")
    pending.commit()

    def owner(path: Path) -> tuple[int, int, int]:
        found = path.stat()
        return found.st_uid, found.st_gid, stat.S_IMODE(found.st_mode)

    assert owner(root / "a" / "kept") == (0, 0, 0o755)  # found, not made: left as it was
    assert owner(root / "a" / "kept" / "made") == (5001, 7001, 0o2770)
    assert owner(root / "a" / "kept" / "made" / "f.bin") == (5001, 7001, 0o660)
