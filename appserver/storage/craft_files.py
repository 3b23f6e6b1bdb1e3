"""Files the server keeps in directories under ``<workspace>/.craft/``, never through a link.

``.craft/`` can arrive with a checkout (docs/security.md), so a directory or file
in it may be a symbolic link to somewhere else: ``.craft/tasks/x -> ~/.ssh``.
Every path here is walked from ``.craft`` one name at a time, each opened
relative to its parent's descriptor with ``O_NOFOLLOW``: a link anywhere fails
with :class:`UnsafePath` instead of being followed, so nothing is read, written
or deleted outside. Writes replace a file atomically (a new file beside it,
``fsync``, ``rename``), so a reader sees the old or the new text, never half.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(OSError):
    """A name on the way is a link, or not a directory / plain file."""


def safe_name(name: str) -> bool:
    """Whether ``name`` can be one directory entry: not empty, no separator, not
    ``.``/``..``, no NUL, not hidden (temporary files start with a dot)."""
    return bool(name) and "/" not in name and "\0" not in name and not name.startswith(".")


@contextlib.contextmanager
def directory(base: Path, names: Sequence[str] = (), create: bool = False) -> Iterator[int]:
    """A descriptor of ``base/names...``, walked without following links.

    ``create``: make missing directories on the way. A missing directory
    otherwise raises ``FileNotFoundError``."""
    try:
        fd = os.open(base, _DIR_FLAGS)
    except OSError as exc:
        raise _unsafe_or(exc, base) from None
    try:
        for name in names:
            if not safe_name(name):
                raise UnsafePath(errno.EINVAL, "not a plain directory name", name)
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _unsafe_or(exc, base / name) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _unsafe_or(exc: OSError, path: Path) -> OSError:
    # O_NOFOLLOW on a link: ELOOP; with O_DIRECTORY on a link or a file: ENOTDIR.
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return UnsafePath(exc.errno, "a symbolic link or not a directory", str(path))
    return exc


def read_text(dir_fd: int, name: str, limit: int) -> str | None:
    """The file ``name`` in ``dir_fd`` as UTF-8 (``None`` when missing).

    Raises :class:`UnsafePath` for a link or anything but a plain file, and
    ``ValueError`` past ``limit`` bytes or for text that is not UTF-8."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _unsafe_or(exc, Path(name)) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafePath(errno.EINVAL, "not a plain file", name)
        os.set_blocking(fd, True)
        data = b""
        while chunk := os.read(fd, 65536):
            data += chunk
            if len(data) > limit:
                raise ValueError(f"{name} is larger than {limit} bytes")
    finally:
        os.close(fd)
    return data.decode("utf-8")


def write_text(dir_fd: int, name: str, text: str) -> None:
    """Replace ``name`` in ``dir_fd`` with ``text`` atomically. A link named
    ``name`` is replaced, never written through."""
    temp = f".{name}.{secrets.token_hex(4)}.tmp"
    fd = os.open(temp, _NEW_FLAGS, 0o644, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise


def make_directory(dir_fd: int, name: str) -> bool:
    """Create the directory ``name``; ``False`` when something has that name."""
    if not safe_name(name):
        raise UnsafePath(errno.EINVAL, "not a plain directory name", name)
    try:
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    except FileExistsError:
        return False
    return True


def subdirectories(dir_fd: int) -> list[str]:
    """The names of the real directories in ``dir_fd`` (links and hidden names
    left out), sorted."""
    found = []
    for name in os.listdir(dir_fd):
        if not safe_name(name):
            continue
        try:
            mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(mode):
            found.append(name)
    return sorted(found)


def remove_tree(dir_fd: int, name: str) -> None:
    """Delete the directory ``name`` and everything in it; links inside are
    removed, never followed, and a link named ``name`` is refused."""
    if not safe_name(name):
        raise UnsafePath(errno.EINVAL, "not a plain directory name", name)
    mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    if not stat.S_ISDIR(mode):
        raise UnsafePath(errno.ENOTDIR, "a symbolic link or not a directory", name)
    # With dir_fd, rmtree walks by descriptors (its link-safe variant).
    shutil.rmtree(name, dir_fd=dir_fd)
