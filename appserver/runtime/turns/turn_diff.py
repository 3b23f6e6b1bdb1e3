"""The running diff of everything a turn changed (``turn/diff/updated``).

File tools report what they applied as ``changes`` (``[{path, kind, diff,
movePath?}]``, ``kind`` ``add|update|delete|move``; ``write_file``,
``edit_file`` and ``apply_patch`` alike). :class:`TurnDiff` keeps, per file,
its content before the turn's first change and shows the diff of that against
the file as it is now: a file changed twice is one combined diff, a file
changed back drops out, a moved file diffs its old name against its new one.

Only ``changes`` is needed: the content before the first change is the file
read right after it with that change's diff applied backwards (the diffs are
exact, with context). When that does not work (the diff was cut or there is
none, e.g. a binary file; the file changed meanwhile) the file's diffs are
shown one after the other as they came. Files are read bounded and without
following a symlink; a file that cannot be read counts as gone.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.to_thread

from appserver.tools.file_diff import (
    DIFF_INPUT_MAX_BYTES,
    file_header,
    not_diffable,
    unified_diff,
)
from appserver.tools.nofollow import PathChanged, open_regular

TURN_DIFF_MAX_BYTES = 256 * 1024
KINDS = frozenset({"add", "update", "delete", "move"})

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
# What may come before a diff's first hunk: its file names, and git's headers
# (apply_patch writes them: ``diff --git``, new/deleted file, rename).
_HEADERS = (
    "--- ",
    "+++ ",
    "diff --git ",
    "index ",
    "new file mode ",
    "deleted file mode ",
    "old mode ",
    "new mode ",
    "similarity index ",
    "rename from ",
    "rename to ",
)


def wire_changes(details: dict[str, Any]) -> list[dict[str, str]]:
    """The well-formed entries of an outcome's ``details["changes"]``, with
    only the wire keys (``path``, ``kind``, ``diff``, ``movePath``)."""
    found = details.get("changes")
    if not isinstance(found, list):
        return []
    changes = []
    for entry in found:
        if not isinstance(entry, dict):
            continue
        path, kind, diff = entry.get("path"), entry.get("kind"), entry.get("diff")
        if not (isinstance(path, str) and kind in KINDS and isinstance(diff, str)):
            continue
        change = {"path": path, "kind": str(kind), "diff": diff}
        move = entry.get("movePath")
        if isinstance(move, str):
            change["movePath"] = move
        changes.append(change)
    return changes


def _lines(text: str) -> list[str]:
    pieces = text.split("\n")
    return [piece + "\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


def _hunks(diff: str) -> list[tuple[int, list[str], list[str]]] | None:
    """``(new start, old lines, new lines)`` of each hunk; ``None`` if ``diff``
    is not a complete unified diff (cut, or a note instead of a diff)."""
    hunks: list[tuple[int, list[str], list[str]]] = []
    last = ""  # which side(s) the previous line belongs to
    for line in diff.split("\n")[:-1] if diff.endswith("\n") else diff.split("\n"):
        match = _HUNK.match(line)
        if match:
            hunks.append((int(match.group(3)), [], []))
            continue
        if not hunks:
            if line.startswith(_HEADERS):
                continue
            return [] if line == "(no change)" else None
        _, old, new = hunks[-1]
        marker, text = line[:1], line[1:] + "\n"
        if marker == " ":
            old.append(text)
            new.append(text)
        elif marker in ("-", "+"):
            (old if marker == "-" else new).append(text)
        elif line == "\\ No newline at end of file":
            for side, lines in (("-", old), ("+", new)):
                if last in (" ", side) and lines:
                    lines[-1] = lines[-1][:-1]
            continue
        else:
            return None  # "[... diff truncated ...]" or anything else
        last = marker
    return hunks


def reverse_apply(diff: str, after: str | None) -> str | None:
    """The text ``diff`` was made from, given the text it made (``None``: the
    diff does not fit ``after``)."""
    hunks = _hunks(diff)
    if hunks is None:
        return None
    now = _lines(after or "")
    before: list[str] = []
    cursor = 0
    for start, old, new in hunks:
        index = start - 1 if new else start
        if index < cursor or now[index : index + len(new)] != new:
            return None
        before += now[cursor:index] + old
        cursor = index + len(new)
    return "".join(before + now[cursor:])


def _read(path: Path) -> str | None:
    """The file's text now (``None``: gone, unreadable, too large or not text)."""
    try:
        with open(open_regular(path, os.O_RDONLY), "rb") as handle:
            raw = handle.read(DIFF_INPUT_MAX_BYTES + 1)
    except (OSError, PathChanged):
        return None
    if len(raw) > DIFF_INPUT_MAX_BYTES or b"\0" in raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


@dataclass
class _File:
    """One file the turn changed (under its first name)."""

    shown: str  # the path as first changed
    now_shown: str  # its name now (a move changes it)
    original: str | None = None  # before the turn's first change; None: did not exist
    current: str | None = None  # now; None: gone
    exact: bool = True  # original known; otherwise ``diffs`` are shown as they came
    diffs: list[str] = field(default_factory=list)
    rendered: str | None = None  # cached render, None when stale


class TurnDiff:
    """The files one turn changed and their combined diff."""

    def __init__(self, workspace: Path) -> None:
        self.workspace = workspace
        self._files: dict[str, _File] = {}  # by each file's name now
        self._order: list[_File] = []

    def _path(self, shown: str) -> Path:
        return Path(shown) if os.path.isabs(shown) else self.workspace / shown

    async def record(self, changes: list[dict[str, str]]) -> str:
        """Take the ``changes`` one call applied; the whole diff now."""
        for change in changes:
            shown, target = change["path"], change.get("movePath") or change["path"]
            current = await anyio.to_thread.run_sync(_read, self._path(target))
            if change["kind"] == "delete":
                current = None
            tracked = self._files.get(shown)
            if tracked is None:
                tracked = _File(shown=shown, now_shown=shown)
                self._order.append(tracked)
                if change["kind"] != "add":
                    before = reverse_apply(change["diff"], current)
                    tracked.original, tracked.exact = before, before is not None
            self._files[target] = tracked
            if target != shown:  # moved: its old name is free for a new file
                self._files.pop(shown, None)
            tracked.now_shown, tracked.current, tracked.rendered = target, current, None
            tracked.diffs.append(change["diff"])
        return await anyio.to_thread.run_sync(self.render)

    def render(self) -> str:
        """Every changed file's diff, in the order they were first changed."""
        out: list[str] = []
        used = 0
        for index, tracked in enumerate(self._order):
            if tracked.rendered is None:
                tracked.rendered = _render(tracked)
            size = len(tracked.rendered.encode("utf-8", errors="surrogatepass"))
            if used + size > TURN_DIFF_MAX_BYTES:
                left = len(self._order) - index
                out.append(f"[... turn diff truncated at 256 KiB: {left} more file(s)]\n")
                break
            out.append(tracked.rendered)
            used += size
        return "".join(out)


def _render(tracked: _File) -> str:
    if not tracked.exact:
        return "".join(tracked.diffs)
    moved = tracked.now_shown != tracked.shown
    if tracked.original == tracked.current and not moved:
        return ""  # changed back, or created and removed
    diff = unified_diff(tracked.now_shown, tracked.original, tracked.current or "")
    if not diff.startswith("--- "):
        return diff if tracked.current is not None else not_diffable(tracked.shown, "deleted")
    body = diff.split("\n", 2)[2]
    before = None if tracked.original is None else tracked.shown
    after = None if tracked.current is None else tracked.now_shown
    return file_header(before, after) + body
