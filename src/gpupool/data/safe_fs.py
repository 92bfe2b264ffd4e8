"""File I/O below a team's storage root that never follows a path a job controls (C1, C2, H2).

Jobs own directories inside their team's storage, so any path below the root may change
between a check and a use: a directory swapped for a symlink (``renameat2`` with
``RENAME_EXCHANGE``) would send a server running as root anywhere. So nothing here uses a
path twice. The root is opened once (its path is the operator's), then every component is
opened *relative to the directory fd of its parent* with ``O_NOFOLLOW``; the file is read,
or written and renamed, through those fds. Invariants:

* a symbolic link anywhere (the last component included) is refused, never followed
  (:class:`Symlink`); ``..`` and ``/`` never reach here (paths are canonical, see
  :mod:`gpupool.data.paths`), so each step stays inside the directory just opened;
* when an :class:`Identity` is given (the server runs as root and the job's user has a
  POSIX identity), the server does only what that user could do: it checks the user's
  permission bits on the ``fstat`` of every fd it opened (``x`` on each directory walked,
  ``r`` on the file it reads, ``w`` and ``x`` on a directory it creates in, the sticky bit's
  rule when replacing); ACLs are not consulted;
* a read opens only a regular file (never a FIFO or device: ``O_NONBLOCK`` and a type check
  after the open), and a write lands whole or not at all: a new file made with
  ``O_CREAT | O_EXCL | O_NOFOLLOW`` in the parent's fd, given its owner and mode through its
  own fd, written, ``fsync``'d and renamed within that same directory fd;
* what a write creates gets the owner and modes of :class:`NewOwner` (applied with
  ``fchown``/``fchmod`` on fds the server itself just created, never on a path), so outputs
  belong to the job's user (M5).

Why a walk and not ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)``: the permission rule
needs the ``stat`` of every directory on the way anyway, and one ``openat`` per component
with ``O_NOFOLLOW`` is equally safe and works on every kernel, so there is one code path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

READ, WRITE, EXEC = 4, 2, 1

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_FRESH_MODE = 0o700  # what this module creates starts private, until owner and mode are set


class Refused(Exception):
    """A request the file system state does not allow. The message names the path relative
    to the team root (never the server's own directories) and what to do."""


class Symlink(Refused):
    pass


class Denied(Refused):
    pass


class Missing(Refused):
    pass


class NotAFile(Refused):
    """A directory, FIFO, socket or device where a regular file was needed."""

    def __init__(self, message: str, *, directory: bool) -> None:
        super().__init__(message)
        self.directory = directory


@dataclass(frozen=True, slots=True)
class Identity:
    """The POSIX identity a request is checked as: the job's uid, primary gid and groups."""

    uid: int
    gid: int
    groups: frozenset[int]

    def allows(self, info: os.stat_result, want: int) -> bool:
        """Whether the classic owner/group/other bits give ``want`` (``READ | EXEC``, ...)."""
        if self.uid == 0:
            return True  # root: the kernel overrides the bits of files it reads or writes
        mode = info.st_mode
        if info.st_uid == self.uid:
            bits = mode >> 6
        elif info.st_gid == self.gid or info.st_gid in self.groups:
            bits = mode >> 3
        else:
            bits = mode
        return bits & want == want


@dataclass(frozen=True, slots=True)
class NewOwner:
    """Owner and modes of what a write creates. ``uid``/``gid`` None: keep the server's."""

    uid: int | None
    gid: int | None
    dir_mode: int
    file_mode: int


def _shown(parts: Sequence[str], upto: int) -> str:
    return "/".join(parts[: upto + 1])


def _open_dir(parent: int, parts: Sequence[str], i: int) -> int:
    """The directory ``parts[i]`` in ``parent``, opened without following a link."""
    try:
        return os.open(parts[i], _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        raise Missing(f"{_shown(parts, i)} does not exist") from None
    except PermissionError:
        raise Denied(f"no permission to enter {_shown(parts, i)}") from None
    except OSError as exc:
        if exc.errno in (errno.ENOTDIR, errno.ELOOP):
            _refuse_non_directory(parent, parts, i)
        raise


def _refuse_non_directory(parent: int, parts: Sequence[str], i: int) -> None:
    try:
        info = os.stat(parts[i], dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        raise Missing(f"{_shown(parts, i)} does not exist") from None
    if stat.S_ISLNK(info.st_mode):
        raise Symlink(_link_message(parts, i))
    if stat.S_ISDIR(info.st_mode):  # a link when opened, a directory now: it is being swapped
        raise Symlink(f"{_shown(parts, i)} changed while it was opened; " + _link_message(parts, i))
    raise Missing(f"{_shown(parts, i)} is not a directory")


def _link_message(parts: Sequence[str], i: int) -> str:
    return (
        f"{_shown(parts, i)} is a symbolic link; artifact URLs never follow links "
        "(put the real directory or file there)"
    )


def _check(who: Identity | None, info: os.stat_result, want: int, what: str) -> None:
    if who is not None and not who.allows(info, want):
        raise Denied(f"the job's user (uid {who.uid}) may not {what}")


def _open_root(root: Path) -> int:
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Missing("the team's storage root does not exist yet") from None


@dataclass(slots=True)
class OpenedFile:
    """A regular file opened for reading; ``size`` is its size when opened."""

    fd: int
    size: int

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)


def open_read(root: Path, parts: Sequence[str], who: Identity | None) -> OpenedFile:
    """Open ``root/parts...`` for reading (see the module docstring for what is refused)."""
    fd = _open_root(root)
    try:
        _check(who, os.fstat(fd), EXEC, "enter the team's storage root")
        for i in range(len(parts) - 1):
            child = _open_dir(fd, parts, i)
            os.close(fd)
            fd = child
            _check(who, os.fstat(fd), EXEC, f"enter {_shown(parts, i)}")
        last = len(parts) - 1
        try:
            file = os.open(parts[last], _READ_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            raise Missing(f"no file {_shown(parts, last)}") from None
        except PermissionError:
            raise Denied(f"no permission to read {_shown(parts, last)}") from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Symlink(_link_message(parts, last)) from None
            raise
    finally:
        os.close(fd)
    try:
        info = os.fstat(file)
        if stat.S_ISDIR(info.st_mode):
            raise NotAFile(f"{_shown(parts, last)} is a directory", directory=True)
        if not stat.S_ISREG(info.st_mode):
            raise NotAFile(f"{_shown(parts, last)} is not a regular file", directory=False)
        _check(who, info, READ, f"read {_shown(parts, last)}")
        os.set_blocking(file, True)
    except BaseException:
        os.close(file)
        raise
    return OpenedFile(file, info.st_size)


class PendingWrite:
    """A new file being written in its final directory; :meth:`commit` renames it into place,
    :meth:`abort` removes it. Exactly one of them must be called."""

    def __init__(self, dir_fd: int, name: str, temp: str, fd: int) -> None:
        self._dir = dir_fd
        self._name = name
        self._temp = temp
        self._fd = fd
        self.size = 0

    def write(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        while view:
            done = os.write(self._fd, view)
            view = view[done:]
        self.size += len(chunk)

    def commit(self) -> None:
        try:
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
            # Within the one directory fd that was checked: never a path the job can swap.
            os.rename(self._temp, self._name, src_dir_fd=self._dir, dst_dir_fd=self._dir)
            os.fsync(self._dir)
        except BaseException:
            self.abort()
            raise
        os.close(self._dir)
        self._dir = -1

    def abort(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._dir >= 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._temp, dir_fd=self._dir)
            os.close(self._dir)
            self._dir = -1


def begin_write(
    root: Path, parts: Sequence[str], who: Identity | None, new: NewOwner
) -> PendingWrite:
    """Walk to the parent of ``parts`` (making missing directories as ``new`` says), check
    that the file may be written there, and open a fresh temporary file next to it."""
    as_root = os.geteuid() == 0
    fd = _open_root(root)
    try:
        _check(who, os.fstat(fd), EXEC, "enter the team's storage root")
        for i in range(len(parts) - 1):
            child = _open_or_make_dir(fd, parts, i, who, new, as_root)
            os.close(fd)
            fd = child
            _check(who, os.fstat(fd), EXEC, f"enter {_shown(parts, i)}")
        last = len(parts) - 1
        parent = os.fstat(fd)
        _check(who, parent, WRITE | EXEC, f"write in {_shown(parts, last - 1)}")
        _check_replace(fd, parts, who, parent)
        temp = f".gp-{secrets.token_hex(8)}.part"
        try:
            file = os.open(temp, _NEW_FLAGS, 0o600, dir_fd=fd)
        except PermissionError:
            raise Denied(f"no permission to write in {_shown(parts, last - 1)}") from None
        try:
            _own(file, new.file_mode, new, as_root)
        except BaseException:
            os.close(file)
            os.unlink(temp, dir_fd=fd)
            raise
    except BaseException:
        os.close(fd)
        raise
    return PendingWrite(fd, parts[last], temp, file)


def _check_replace(
    fd: int, parts: Sequence[str], who: Identity | None, parent: os.stat_result
) -> None:
    """What is at the final name now may be replaced by a file: nothing, or a file."""
    last = len(parts) - 1
    try:
        info = os.stat(parts[last], dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise Symlink(_link_message(parts, last))
    if stat.S_ISDIR(info.st_mode):
        raise NotAFile(f"{_shown(parts, last)} is a directory", directory=True)
    sticky = parent.st_mode & stat.S_ISVTX
    if sticky and who is not None and who.uid not in (0, parent.st_uid, info.st_uid):
        raise Denied(
            f"{_shown(parts, last)} belongs to another user in a sticky directory; "
            "write another name"
        )


def _open_or_make_dir(
    parent: int,
    parts: Sequence[str],
    i: int,
    who: Identity | None,
    new: NewOwner,
    as_root: bool,
) -> int:
    try:
        return _open_dir(parent, parts, i)
    except Missing:
        pass
    _check(who, os.fstat(parent), WRITE | EXEC, f"create {_shown(parts, i)}")
    try:
        os.mkdir(parts[i], _FRESH_MODE, dir_fd=parent)
    except FileExistsError:
        return _open_dir(parent, parts, i)  # made meanwhile: use it as found (not re-owned)
    except PermissionError:
        raise Denied(f"no permission to create {_shown(parts, i)}") from None
    child = _open_dir(parent, parts, i)
    try:
        info = os.fstat(child)
        # Re-own only the directory this call made: still the server's, private and empty.
        # One swapped in meanwhile (by a job that may write here) is used as found.
        mine = info.st_uid == os.geteuid() and not info.st_mode & 0o077 and info.st_nlink == 2
        if mine:
            _own(child, new.dir_mode, new, as_root)
    except BaseException:
        os.close(child)
        raise
    return child


def _own(fd: int, mode: int, new: NewOwner, as_root: bool) -> None:
    if as_root and new.uid is not None and new.gid is not None:
        os.fchown(fd, new.uid, new.gid)
    os.fchmod(fd, mode)  # after fchown, which clears the setgid bit
