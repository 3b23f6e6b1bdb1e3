"""Opening a resolved path without following any symlink.

A tool resolves its path once, when it plans the call (``Sandbox.resolve``:
absolute, every symlink resolved), and the approval shows that path. Between
the plan and the run (while a person decides, or in the microseconds before
the open) whoever can write to the workspace can swap a directory or the
file itself for a symlink, or a directory for a link to another one.
Checking ``realpath`` again and then opening by name leaves that window open.

Here the path is walked from ``/`` one component at a time, each opened
relative to its parent's descriptor with ``O_NOFOLLOW``: a symlink anywhere
on the path fails the open with :class:`PathChanged` instead of being
followed, so what is opened is the object the approval named or nothing.
The same walk serves paths outside the workspace that a person approved:
they were resolved once too, and are opened exactly as shown.

Directories on the way are opened with ``O_PATH`` (search permission is
enough, as for an ordinary open). Linux only, like the rest of the tools.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

# O_PATH needs only search permission on a directory; O_RDONLY where it is missing.
_SEARCH: int = getattr(os, "O_PATH", os.O_RDONLY)
_WALK_FLAGS = _SEARCH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LIST_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class PathChanged(Exception):
    """A component of an approved path is a symlink now (or the file appeared
    or vanished under the call): the call fails rather than reach elsewhere."""

    def __init__(self, path: Path, what: str = "a symlink appeared") -> None:
        super().__init__(f"{path} changed ({what}) since the call was approved")
        self.path = path


def _components(path: Path) -> tuple[str, ...]:
    """The names under ``/``; a relative path or one with ``.``/``..`` is a bug."""
    if not path.is_absolute():
        raise ValueError(f"{path} is not an absolute path")
    names = path.parts[1:]
    if any(name in ("", ".", "..") for name in names):
        raise ValueError(f"{path} is not a resolved path")
    return names


def _is_link(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode)
    except OSError:
        return False


def _open_child(parent: int, name: str, flags: int, path: Path, mode: int = 0o666) -> int:
    """``name`` opened under ``parent``; a symlink there is :class:`PathChanged`."""
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=parent)
    except OSError as exc:
        # A link under O_NOFOLLOW is ELOOP, or ENOTDIR with O_DIRECTORY: tell
        # it apart from an ordinary file standing where a directory should.
        if exc.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(parent, name):
            raise PathChanged(path) from None
        raise


def open_directory(path: Path, *, listable: bool = False, create: bool = False) -> int:
    """A descriptor of the directory ``path`` (absolute and symlink-free),
    reached without following any symlink.

    ``listable``: opened for reading (``os.scandir``); otherwise an ``O_PATH``
    descriptor, enough as a ``dir_fd`` or a working directory. ``create``:
    missing directories are made on the way (``mkdir`` then an ``O_NOFOLLOW``
    open, so a link raced in after the ``mkdir`` still fails). The caller
    closes the descriptor.
    """
    names = _components(path)
    fd = os.open("/", _LIST_FLAGS if listable and not names else _WALK_FLAGS)
    try:
        for index, name in enumerate(names):
            flags = _LIST_FLAGS if listable and index == len(names) - 1 else _WALK_FLAGS
            try:
                child = _open_child(fd, name, flags, path)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, dir_fd=fd)
                child = _open_child(fd, name, flags, path)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path: Path, flags: int, *, create_parents: bool = False, mode: int = 0o666) -> int:
    """A descriptor of the file ``path`` (absolute and symlink-free) opened
    with ``flags``, its directories walked and the file itself opened with
    ``O_NOFOLLOW``. With ``O_CREAT | O_EXCL`` a new file is made in the
    directory reached (never through a link). The caller closes it."""
    parent = open_directory(path.parent, create=create_parents)
    try:
        return _open_child(parent, path.name, flags, path, mode)
    finally:
        os.close(parent)


def open_regular(path: Path, flags: int) -> int:
    """:func:`open_file` for a regular file only (``O_NONBLOCK`` added, so a
    FIFO put in its place cannot hang the open); anything else is refused
    with ``OSError``."""
    fd = open_file(path, flags | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        # Back to blocking I/O (regular files ignore the flag, but be plain).
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd
