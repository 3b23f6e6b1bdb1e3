"""Background terminals' output files, kept inside the real ``.craft/terminals/``.

``.craft/`` can arrive with a checkout, and so can its database. Neither may
send the server's writes, reads or deletions elsewhere:

- a terminal's file is ``<root>/<thread segment>/<sessionId>.log``, derived
  from the terminal's ids (never the ``outputPath`` a database row names);
- ``root`` (``.craft/terminals``), the thread's directory and the file are
  each opened relative to the one before with ``O_NOFOLLOW``: a symbolic link
  at any of them fails the open (no output is written or read there) instead
  of being followed;
- a file is read only if it is a regular file (not a FIFO or a device);
- a thread's directory is removed only if it is a real directory inside the
  real ``root`` (``shutil.rmtree`` relative to ``root``'s descriptor, which
  does not follow links inside either).

Only the parent of ``root`` (``.craft``, which the workspace lock already
created) is opened by name.
"""

from __future__ import annotations

import codecs
import errno
import logging
import os
import re
import shutil
import stat
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

log = logging.getLogger("appserver.tools")

KEPT_CHARS = 1024 * 1024  # tail of the output kept in memory (and the most a snapshot shows)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


class UnsafeTerminalPath(OSError):
    """A terminals directory or output file is a link (or not what it should be)."""


def thread_segment(thread_id: str) -> str:
    """A thread id as one safe directory name."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", thread_id).strip(".") or "workspace"


def _file_name(session_id: str) -> str | None:
    """``<sessionId>.log``, or ``None`` for an id that is not one plain name."""
    return f"{session_id}.log" if _NAME.fullmatch(session_id) else None


class TerminalFiles:
    """The output files under ``root`` (``<workspace>/.craft/terminals``)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path_of(self, thread_id: str, session_id: str) -> Path:
        """Where the output of ``session_id`` (of ``thread_id``) lives."""
        return self.root / thread_segment(thread_id) / (_file_name(session_id) or "-")

    def create(self, thread_id: str, session_id: str) -> IO[str]:
        """A new output file, open for writing (text, no newline translation).

        Raises :class:`UnsafeTerminalPath` when ``root`` or the thread's
        directory is a link, ``OSError`` when the file cannot be made."""
        name = _file_name(session_id)
        if name is None:
            raise UnsafeTerminalPath(errno.EINVAL, "not a terminal id", session_id)
        self.root.parent.mkdir(parents=True, exist_ok=True)
        with (
            _opened_dir(self.root.parent, self.root.name, create=True) as root_fd,
            _opened_dir(root_fd, thread_segment(thread_id), create=True) as thread_fd,
        ):
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(name, flags, 0o644, dir_fd=thread_fd)
        return open(fd, "w", encoding="utf-8", newline="")  # the caller closes it

    def read_tail(
        self, thread_id: str, session_id: str, counted: int | None = None
    ) -> tuple[str, int]:
        """The last :data:`KEPT_CHARS` characters of a terminal's output and its
        length in characters; ``("", 0)`` when there is no such regular file
        under the real ``root`` (a link anywhere on the way counts as none).

        ``counted``: that length (without trailing newlines) is known, so a
        large file is read from its end only."""
        name = _file_name(session_id)
        if name is None:
            return "", 0
        try:
            with (
                _opened_dir(self.root.parent, self.root.name) as root_fd,
                _opened_dir(root_fd, thread_segment(thread_id)) as thread_fd,
            ):
                flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                fd = os.open(name, flags, dir_fd=thread_fd)
            with open(fd, "rb") as file:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    return "", 0
                return _tail(file, counted)
        except FileNotFoundError:
            return "", 0
        except OSError as exc:
            where = self.path_of(thread_id, session_id)
            log.warning("not reading terminal output %s: %s", where, exc)
            return "", 0

    def remove_thread(self, thread_id: str) -> None:
        """Remove the thread's directory if it is a real directory in the real
        ``root``; a link in its place (or as ``root``) is left alone, as is
        everything it points to."""
        segment = thread_segment(thread_id)
        try:
            with _opened_dir(self.root.parent, self.root.name) as root_fd:
                info = os.stat(segment, dir_fd=root_fd, follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode):
                    log.warning("not removing %s: not a directory", self.root / segment)
                    return
                # rmtree with dir_fd walks by descriptors and never follows a link.
                shutil.rmtree(segment, dir_fd=root_fd, ignore_errors=True)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("not removing terminal output of %s: %s", thread_id, exc)


@contextmanager
def _opened_dir(parent: Path | int, name: str, *, create: bool = False) -> Iterator[int]:
    """``name`` in ``parent`` (a path, or a directory descriptor) opened as a
    directory without following a link; made first with ``create``."""
    if isinstance(parent, int):
        parent_fd = parent
    else:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if create:
            with suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=parent_fd)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # Linux: ENOTDIR for a link
                where = name if isinstance(parent, int) else str(Path(parent) / name)
                raise UnsafeTerminalPath(exc.errno, "a link or not a directory", where) from None
            raise
    finally:
        if not isinstance(parent, int):
            os.close(parent_fd)
    try:
        yield fd
    finally:
        os.close(fd)


def _tail(file: IO[bytes], counted: int | None) -> tuple[str, int]:
    if counted is not None:
        size = file.seek(0, os.SEEK_END)
        if size > 4 * KEPT_CHARS:
            file.seek(size - 4 * KEPT_CHARS)
            text = file.read().decode("utf-8", errors="replace")[1:]  # a cut character
            text = text[len(text) - KEPT_CHARS :]
            return text, counted + len(text) - len(text.rstrip("\r\n"))
        file.seek(0)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    tail: deque[str] = deque()
    kept = total = 0
    while chunk := file.read(1 << 20):
        text = decoder.decode(chunk)
        total += len(text)
        tail.append(text)
        kept += len(text)
        while kept - len(tail[0]) >= KEPT_CHARS:
            kept -= len(tail.popleft())
    text = decoder.decode(b"", final=True)
    total += len(text)
    tail.append(text)
    joined = "".join(tail)
    return joined[len(joined) - KEPT_CHARS :] if len(joined) > KEPT_CHARS else joined, total
