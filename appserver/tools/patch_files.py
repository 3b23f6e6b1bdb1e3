"""Writing a planned patch to disk, all or nothing (``apply_patch``'s run).

First every file is checked, touching nothing: a file to update, delete or
move is opened as planned (no link followed, ``tools.nofollow``), must have no
more hard links than the approval showed and must hold exactly the text the
plan read; a file to add (or a move's destination) must still not exist.
Then the changes are made: updates through the descriptors the check opened
(what is written is the file that was read), new files created in the
directory reached (``O_CREAT | O_EXCL``, never through a link), and last the
deletions, each only if the name still holds the file that was checked. If
any step fails, the steps already done are undone in reverse order (old text
written back, created files removed, deleted files recreated with their mode)
and the call fails.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from appserver.tools.file_common import FileFailure
from appserver.tools.file_snapshot import check_links, overwrite
from appserver.tools.nofollow import PathChanged, open_directory, open_file, open_regular


@dataclass(frozen=True)
class FileChange:
    """One file of a planned patch.

    ``kind``: ``add``, ``update``, ``delete`` or ``move`` (an update whose result
    is written to ``move_path`` and whose old name is removed). ``before``: the
    text the plan read (``None`` for an added file); ``after``: the text to
    write (``None`` for a deleted file). ``links`` and ``mode``: the hard-link
    count the approval showed and the file's permission bits (a moved file
    keeps them).
    """

    kind: str
    path: Path
    shown: str
    inside: bool
    before: str | None
    after: str | None
    links: int = 1
    mode: int = 0o644
    move_path: Path | None = None
    move_shown: str | None = None
    move_inside: bool | None = None


@dataclass
class _Checked:
    change: FileChange
    fd: int | None = None  # the open file to update, delete or move
    identity: tuple[int, int] = (0, 0)  # (st_dev, st_ino) of that file


def _changed(shown: str, what: str) -> FileFailure:
    return FileFailure(
        f"{shown} {what} since the patch was planned; nothing was applied. Read the file "
        "again and make a new patch."
    )


def _check_existing(change: FileChange) -> _Checked:
    flags = os.O_RDWR if change.kind == "update" else os.O_RDONLY
    try:
        fd = open_regular(change.path, flags)
    except PathChanged as exc:
        raise FileFailure(f"{exc}; nothing was applied") from None
    except FileNotFoundError:
        raise _changed(change.shown, "was removed") from None
    checked = _Checked(change, fd)
    try:
        check_links(fd, change.shown, change.links)
        expected = (change.before or "").encode("utf-8")
        with open(fd, "rb", closefd=False) as handle:
            found = handle.read(len(expected) + 1)
        if found != expected:
            raise _changed(change.shown, "changed")
        info = os.fstat(fd)
        checked.identity = (info.st_dev, info.st_ino)
    except BaseException:
        os.close(fd)
        raise
    return checked


def _check_absent(path: Path, shown: str) -> None:
    if os.path.lexists(path):
        raise FileFailure(f"{shown} was created since the patch was planned; nothing was applied")


def _check_all(changes: list[FileChange], checked: list[_Checked]) -> None:
    for change in changes:
        if change.kind == "add":
            _check_absent(change.path, change.shown)
            checked.append(_Checked(change))
            continue
        if change.move_path is not None:
            _check_absent(change.move_path, change.move_shown or str(change.move_path))
        checked.append(_check_existing(change))


def _create(path: Path, data: bytes, mode: int | None) -> None:
    """A new file at ``path`` (it must not exist), parents made as needed."""
    try:
        fd = open_file(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, create_parents=True)
    except PathChanged as exc:
        raise FileFailure(str(exc)) from None
    with open(fd, "wb") as handle:
        if mode is not None:
            os.fchmod(fd, mode)
        handle.write(data)


def _unlink(path: Path, identity: tuple[int, int] | None = None) -> None:
    """Remove the name ``path``; with ``identity``, only while it names that file."""
    parent = open_directory(path.parent)
    try:
        if identity is not None:
            info = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
            if (info.st_dev, info.st_ino) != identity:
                raise PathChanged(path, "another file took its name")
        os.unlink(path.name, dir_fd=parent)
    finally:
        os.close(parent)


def _rewrite(fd: int, data: bytes) -> None:
    with open(fd, "r+b", closefd=False) as handle:
        overwrite(handle, data)


def _apply(checked: list[_Checked], undo: list[Callable[[], None]]) -> None:
    """Make every change, recording how to undo each one as it is made."""
    for item in checked:
        change = item.change
        if change.kind == "update" and item.fd is not None:
            fd, old = item.fd, (change.before or "").encode("utf-8")
            _rewrite(fd, (change.after or "").encode("utf-8"))
            undo.append(partial(_rewrite, fd, old))
    for item in checked:
        change = item.change
        target = change.move_path if change.kind == "move" else change.path
        if change.kind in ("add", "move") and target is not None:
            mode = change.mode if change.kind == "move" else None
            _create(target, (change.after or "").encode("utf-8"), mode)
            undo.append(partial(_unlink, target))
    for item in checked:
        change = item.change
        if change.kind in ("delete", "move"):
            _unlink(change.path, item.identity)
            old, path, mode = (change.before or "").encode("utf-8"), change.path, change.mode
            undo.append(partial(_create, path, old, mode))


def _undo(undo: list[Callable[[], None]]) -> list[str]:
    """Undo the steps done, newest first; what could not be undone."""
    failures: list[str] = []
    for step in reversed(undo):
        try:
            step()
        except (OSError, PathChanged, FileFailure) as exc:
            failures.append(str(exc))
    return failures


def apply_changes(changes: list[FileChange]) -> None:
    """Apply every change or none; :class:`FileFailure` says why and what was restored."""
    checked: list[_Checked] = []
    try:
        try:
            _check_all(changes, checked)
        except OSError as exc:
            raise FileFailure(f"cannot apply the patch: {exc}; nothing was applied") from None
        undo: list[Callable[[], None]] = []
        try:
            _apply(checked, undo)
        except (OSError, PathChanged, FileFailure) as exc:
            failures = _undo(undo)
            restored = (
                "the files already changed were restored"
                if not failures
                else "some changes could not be undone: " + "; ".join(failures)
            )
            raise FileFailure(f"cannot apply the patch: {exc}; {restored}") from None
    finally:
        for item in checked:
            if item.fd is not None:
                with contextlib.suppress(OSError):
                    os.close(item.fd)
