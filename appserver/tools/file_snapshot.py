"""The file as a write, edit or patch plan saw it, and the checks its run makes.

A plan reads the file once, bounded and without following a link
(:func:`read_snapshot`), so the approval can show a diff and say how many hard
links the file has; the run refuses a file with more links than the approval
showed (:func:`check_links`). The hard-link rule is explained in
``tools.file_writes``.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from appserver.tools.base import ApprovalNeed
from appserver.tools.file_common import BINARY_SNIFF_BYTES, FileFailure
from appserver.tools.file_diff import DIFF_INPUT_MAX_BYTES
from appserver.tools.nofollow import PathChanged, open_regular
from appserver.tools.sandbox import ResolvedPath


@dataclass(frozen=True)
class Snapshot:
    """The file as the plan saw it."""

    exists: bool
    links: int  # st_nlink; 1 for a file that does not exist yet
    text: str | None = None  # None: not shown (see ``why``), or no file
    why: str = ""  # why ``text`` is not shown


def read_snapshot(path: Path, max_bytes: int = DIFF_INPUT_MAX_BYTES) -> Snapshot:
    """Read the file at ``path`` (no link followed), at most ``max_bytes``."""
    try:
        links = os.lstat(path).st_nlink
    except FileNotFoundError:
        return Snapshot(exists=False, links=1)
    except OSError as exc:
        return Snapshot(exists=True, links=1, why=exc.strerror or "unreadable")
    try:
        with open(open_regular(path, os.O_RDONLY), "rb") as handle:
            links = os.fstat(handle.fileno()).st_nlink
            raw = handle.read(max_bytes + 1)
    except PathChanged:
        return Snapshot(exists=True, links=links, why="it changed (a symlink appeared)")
    except OSError as exc:
        return Snapshot(exists=True, links=links, why=exc.strerror or "unreadable")
    text, why = diffable_text(raw, max_bytes)
    return Snapshot(True, links, text=text, why=why)


def diffable_text(raw: bytes, max_bytes: int = DIFF_INPUT_MAX_BYTES) -> tuple[str | None, str]:
    """``raw`` (read up to ``max_bytes + 1``) as text to diff, or ``None`` and why not."""
    if len(raw) > max_bytes:
        return None, f"it is larger than {max_bytes // 1024} KiB"
    if b"\0" in raw[:BINARY_SNIFF_BYTES]:
        return None, "it looks like a binary file"
    try:
        return raw.decode("utf-8"), ""
    except UnicodeDecodeError:
        return None, "it is not UTF-8 text"


def file_change(display: str, kind: str, diff: str) -> dict[str, str]:
    """One entry of an outcome's ``details["changes"]`` (the ``toolResult``
    item's ``changes``): what a call applied to one file, diffed against the
    file as it was just before."""
    return {"path": display, "kind": kind, "diff": diff}


def links_note(links: int) -> str:
    """The prompt's note on a file with more than one hard link (empty for one)."""
    if links <= 1:
        return ""
    return (
        f"; it has {links} hard links: this changes the file under every one of its "
        "names, which may lie outside the workspace"
    )


def file_need(
    operation: str,
    target: ResolvedPath,
    reason: str,
    snapshot: Snapshot,
    diff: str,
) -> ApprovalNeed:
    """The approval of changing one file: asked as outside when it lies outside or
    has more than one hard link (see ``tools.file_writes``)."""
    return ApprovalNeed(
        kind="file",
        operation=operation,
        target=str(target.path),
        reason=reason + links_note(snapshot.links),
        # A hard-linked file may be one outside: asked as outside (see the module docstring).
        outside_workspace=not target.inside or snapshot.links > 1,
        diff=diff,
    )


def check_links(fd: int, display: str, links_shown: int) -> None:
    """Refuse a file with more hard links than the approval showed."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise FileFailure(f"{display} is not a regular file")
    if info.st_nlink > links_shown:
        shown = "did not mention them" if links_shown <= 1 else f"showed {links_shown}"
        raise FileFailure(
            f"{display} has {info.st_nlink} hard links and the approval {shown}: writing it "
            "would change the file under its other names too, which may lie outside the "
            "workspace. Refused; the file is unchanged."
        )


def overwrite(handle: BinaryIO, data: bytes) -> None:
    """Replace the content of the open file in place."""
    handle.seek(0)
    handle.truncate()
    handle.write(data)
